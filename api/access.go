package api

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/auth"
	"mesh/models"
	"mesh/service"
)

type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type tokenResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (s *Server) login(c echo.Context) error {
	var req loginRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	tok, exp, err := s.Service.Login(c.Request().Context(), req.Username, req.Password, c.RealIP())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tokenResponse{Token: tok, ExpiresAt: exp})
}

type userRequest struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	Password string `json:"password"`
}

type userResponse struct {
	Name      string    `json:"name"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

func (s *Server) createUser(c echo.Context) error {
	var req userRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	u, err := s.Service.CreateUser(c.Request().Context(), principal(c).Actor(), &service.CreateUser{Name: req.Name, Role: req.Role, Password: req.Password})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, userResponse{Name: u.Name, Role: u.Role, CreatedAt: u.CreatedAt})
}

// listUsers lists users: name, role and when made, never a password hash.
func (s *Server) listUsers(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	us, err := s.Store.Users(c.Request().Context(), limit, cur)
	if err != nil {
		return err
	}
	views := make([]UserView, len(us))
	for i := range us {
		views[i] = userView(&us[i])
	}
	return c.JSON(http.StatusOK, listOf(views, limit, func(UserView) string { return strconv.FormatInt(us[len(us)-1].ID, 10) }))
}

// Enrolment is what a host needs besides a join token: the mesh CA's pin
// (sha256 of its SubjectPublicKeyInfo), which it checks the controller's
// certificate against before it sends the token, and the controller's URL.
type Enrolment struct {
	CAPin string
	// CAPEM is the mesh CA's certificate, carried by the install one-liner.
	CAPEM []byte
	// URL is the controller as hosts reach it (its first --advertise name);
	// empty: the scheme and Host of the request that made the token.
	URL string
}

type joinTokenResponse struct {
	ID        int64     `json:"id"` // what it is listed and revoked by
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	// CAPin is the mesh CA's pin; Controller the URL to enrol with;
	// Command the whole `mesh-host enroll` line to paste on the machine.
	CAPin      string `json:"ca_pin"`
	Controller string `json:"controller"`
	Command    string `json:"command"`
	// Install is the one-liner that installs mesh-host from this
	// controller and enrols with the token (empty over plain HTTP).
	Install string `json:"install,omitempty"`
}

// enrolCommand is the line a person pastes on a machine. The pin is given
// only with an https:// URL: a host refuses it with a plain one.
func (e Enrolment) enrolCommand(url, token string) string {
	cmd := "mesh-host enroll --controller " + url
	if strings.HasPrefix(url, "https://") && e.CAPin != "" {
		cmd += " --ca-pin " + e.CAPin
	}
	return cmd + " --join-token " + token + ` --name "$(hostname)"`
}

// controllerURL is where hosts enrol: the configured URL, else this
// request's own scheme and host.
func (e Enrolment) controllerURL(r *http.Request) string {
	if e.URL != "" {
		return e.URL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

type joinTokenRequest struct {
	ExpiresIn string `json:"expires_in"`
	// Labels are given to the machine that enrols with the token.
	Labels map[string]string `json:"labels"`
}

func (s *Server) createJoinToken(c echo.Context) error {
	var req joinTokenRequest
	if c.Request().ContentLength != 0 {
		if err := decodeStrict(c, &req); err != nil {
			return err
		}
	}
	tok, exp, id, err := s.Service.CreateJoinToken(c.Request().Context(), principal(c).Actor(), req.ExpiresIn, req.Labels, s.Now())
	if err != nil {
		return err
	}
	url := s.Enrolment.controllerURL(c.Request())
	return c.JSON(http.StatusCreated, joinTokenResponse{ID: id, Token: tok, ExpiresAt: exp, CAPin: s.Enrolment.CAPin,
		Controller: url, Command: s.Enrolment.enrolCommand(url, tok), Install: s.Enrolment.installLine(url, tok)})
}

// JoinTokenView is a join token as listed: its id, never the secret (only
// its hash is kept) nor the hash.
type JoinTokenView struct {
	ID        int64      `json:"id"`
	State     string     `json:"state"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt time.Time  `json:"expires_at"`
	UsedAt    *time.Time `json:"used_at,omitempty"`
	UsedBy    string     `json:"used_by,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	RevokedBy string     `json:"revoked_by,omitempty"`
	// Labels are what the machine enrolling with it is given.
	Labels map[string]string `json:"labels,omitempty"`
}

func (s *Server) joinTokenView(jt *models.JoinToken) JoinTokenView {
	labels, _ := models.ParseLabelsJSON(jt.Labels) // written by CreateJoinToken: valid
	return JoinTokenView{Labels: labels, ID: jt.ID, State: jt.State(s.Now()), CreatedBy: jt.CreatedBy, CreatedAt: jt.CreatedAt,
		ExpiresAt: jt.ExpiresAt, UsedAt: jt.UsedAt, UsedBy: jt.UsedBy, RevokedAt: jt.RevokedAt, RevokedBy: jt.RevokedBy}
}

func (s *Server) listJoinTokens(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	ts, err := s.Store.JoinTokens(c.Request().Context(), limit, cur)
	if err != nil {
		return err
	}
	views := make([]JoinTokenView, len(ts))
	for i := range ts {
		views[i] = s.joinTokenView(&ts[i])
	}
	return c.JSON(http.StatusOK, listOf(views, limit, func(v JoinTokenView) string { return strconv.FormatInt(v.ID, 10) }))
}

func (s *Server) revokeJoinToken(c echo.Context) error {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return models.Invalid("id", "a join token's id, a number")
	}
	jt, err := s.Service.RevokeJoinToken(c.Request().Context(), principal(c).Actor(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.joinTokenView(jt))
}

type enrollRequest struct {
	JoinToken   string `json:"join_token"`
	Name        string `json:"name"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	HostVersion string `json:"host_version"`
	Schema      string `json:"schema"`
	// CSR asks for the machine's client certificate (PEM); the key stays
	// on the machine.
	CSR string `json:"csr,omitempty"`
}

// PublicKey is one of the controller's declaration keys: a host's trust root.
type PublicKey struct {
	KeyID     string `json:"key_id"`
	PublicKey []byte `json:"public_key"`
}

type enrollResponse struct {
	Machine string      `json:"machine"`
	Token   string      `json:"token"`
	Keys    []PublicKey `json:"keys"`
	// Certificate is the machine's client certificate (PEM), issued for
	// the request's CSR; absent without one.
	Certificate string `json:"certificate,omitempty"`
}

func (s *Server) enroll(c echo.Context) error {
	var req enrollRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if req.JoinToken == "" {
		return models.Invalid("join_token", "required")
	}
	if err := models.ValidName("name", req.Name); err != nil {
		return err
	}
	if req.OS == "" || req.Arch == "" {
		return models.Invalid("os", "os and arch are required (e.g. linux, amd64)")
	}
	if err := models.ValidPlatform(req.OS, req.Arch); err != nil {
		return err
	}
	if err := models.ValidVersion("host_version", req.HostVersion, false); err != nil {
		return err
	}
	// Stored on the machine, as its polls' header is: checked as that is,
	// and kept in the same canonical form.
	if req.Schema != "" {
		schemas, err := models.ParseEnrolSchemas(req.Schema)
		if err != nil {
			return err
		}
		req.Schema = schemas.String()
	}
	ctx := c.Request().Context()
	var csr *x509.CertificateRequest
	if req.CSR != "" {
		// Checked before the join token is spent: a refused request
		// leaves it for a corrected one.
		var err error
		// Anonymous: its refusals are kept sparse by the sender's address.
		due := func(row auth.Row) (bool, int) {
			// Counted by address: the rows the count belongs to name it.
			row.Target, row.Of = "address/"+c.RealIP(), "certificate requests at enrolment from "+c.RealIP()+", whatever machine each named"
			return s.refusals.Due(c.RealIP()+"\x00enroll-csr", row)
		}
		if csr, err = s.Service.CheckCSR(ctx, "anonymous", req.Name, req.CSR, c.RealIP(), due); err != nil {
			return err
		}
	}
	tokenID := auth.NewSecret()[:16]
	m, err := s.Store.Enroll(ctx, auth.HashToken(req.JoinToken), req.Name, req.OS, req.Arch, req.HostVersion, req.Schema, tokenID)
	if errors.Is(err, models.ErrTokenUsed) || errors.Is(err, models.ErrConflict) {
		// A refused enrolment is on the record: someone holds a stale or
		// guessed join token, or a good one and an enrolled machine's
		// name. Once a minute per address, with how many more: an
		// outsider's guesses are not a row each.
		s.enrolRefused(c, "machine/"+req.Name, err)
	}
	if err != nil {
		return err
	}
	s.Hub.Add(m)
	tok, err := s.Auth.IssueHost(m.Name, tokenID)
	if err != nil {
		return err
	}
	keys, err := s.Store.Keys(ctx, models.KeyDeclaration)
	if err != nil {
		return err
	}
	resp := enrollResponse{Machine: m.Name, Token: tok, Keys: []PublicKey{}}
	if csr != nil {
		pemCert, _, err := s.Service.IssueCertificate(ctx, "host:"+m.Name, m.Name, tokenID, csr, "at enrolment", true)
		if err != nil {
			return err
		}
		resp.Certificate = string(pemCert)
	}
	for _, k := range keys {
		resp.Keys = append(resp.Keys, PublicKey{KeyID: k.ID, PublicKey: k.PublicKey})
	}
	return c.JSON(http.StatusCreated, resp)
}

// enrolRefused puts a refused enrolment on the record: once a minute per
// address, with how many more, whether it was refused for its join token
// or its name (target: the machine it named) or for its pace (the
// address): an outsider's guesses are not a row each, and those past the
// pace are counted with the rest.
func (s *Server) enrolRefused(c echo.Context, target string, err error) {
	row := auth.Row{Actor: "anonymous", Action: "enroll-refused", Target: "address/" + c.RealIP(),
		Of: "enrolments from " + c.RealIP() + ", whatever machine each named"}
	if due, since := s.refusals.Due(c.RealIP()+"\x00enroll", row); due {
		_ = s.Store.Audit(c.Request().Context(), row.Actor, row.Action, target, fmt.Sprintf("%v (from %s)%s", err, c.RealIP(), auth.Since(since)))
	}
}

// enrolLimited refuses an address past its pace of enrolments, on the
// record with its other refused enrolments.
func (s *Server) enrolLimited(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.enrolLimit.take(c.RealIP()); err != nil {
			s.enrolRefused(c, "address/"+c.RealIP(), err)
			return err
		}
		return next(c)
	}
}
