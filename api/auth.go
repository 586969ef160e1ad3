package api

import (
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"

	"mesh/auth"
	"mesh/conns"
	"mesh/meshca"
	"mesh/models"
)

func bearer(c echo.Context) (string, error) {
	h := c.Request().Header.Get("Authorization")
	if h == "" {
		return "", fmt.Errorf("%w: missing Authorization: Bearer token", models.ErrUnauthorized)
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", fmt.Errorf("%w: Authorization must be a Bearer token", models.ErrUnauthorized)
	}
	return tok, nil
}

// Principal is who made a request.
type Principal struct {
	User    string // a person or builder
	Role    string
	Machine string // a host
	// APIToken: a person came with an API token rather than a login's;
	// tokenID is its id (what the audit log names it by).
	APIToken bool
	tokenID  string
	hostID   int64
	// enrolment is the host's enrolment id; cert its verified client
	// certificate, nil when it came with its bearer token.
	enrolment string
	cert      *meshca.MachineIdentity
}

// Actor is how the audit log names the principal.
func (p *Principal) Actor() string {
	if p.Machine != "" {
		return "host:" + p.Machine
	}
	if p.APIToken {
		// A CI job's token and its owner's login are not the same hand.
		return "user:" + p.User + " (API token " + p.tokenID + ")"
	}
	return "user:" + p.User
}

const principalKey = "mesh.principal"

func principal(c echo.Context) *Principal {
	p, _ := c.Get(principalKey).(*Principal)
	return p
}

// requireRole lets a person through when their role ranks at least min.
func (s *Server) requireRole(min string) echo.MiddlewareFunc {
	return s.requirePerson(func(role string) error {
		if models.RoleRank(role) < models.RoleRank(min) {
			return fmt.Errorf("%w: role %s may not do this (needs %s)", models.ErrForbidden, role, min)
		}
		return nil
	})
}

// requirePerson lets a person's token through when allowed says nothing
// against its role.
func (s *Server) requirePerson(allowed func(role string) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			tok, err := bearer(c)
			if err != nil {
				return err
			}
			claims, err := s.Auth.ParsePerson(tok)
			if err != nil {
				return err
			}
			if err := allowed(claims.Role); err != nil {
				return err
			}
			conns.Known(c.Request(), "person", claims.Subject) // a person's connection never makes room past the cap
			c.Set(principalKey, &Principal{User: claims.Subject, Role: claims.Role, APIToken: claims.Kind == auth.KindAPIToken, tokenID: claims.ID})
			return next(c)
		}
	}
}

// requireHost lets a host through, known by its client certificate or
// its bearer token (hostAuth). It checks against the hub's memory, never
// the store, so an idle poll costs the store nothing.
func (s *Server) requireHost(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := s.hostAuth(c, false)
		if err != nil {
			return err
		}
		c.Set(principalKey, p)
		return next(c)
	}
}

// hostAuth says which machine a request comes from. A client certificate,
// when one was presented (the listener requests them and lets the request
// path judge), is verified here against the mesh CA — chain, expiry,
// revocation — so a refusal is a problem that names the machine, recorded
// where an operator sees it; without one, the bearer token. Both name the
// machine and its enrolment, which must be the machine's current one and
// not revoked. An expired certificate within its grace passes only when
// renewal says so (the renewal route).
func (s *Server) hostAuth(c echo.Context, renewal bool) (*Principal, error) {
	var name, enrolment string
	var cert *meshca.MachineIdentity
	bearerOnly := false
	if chain := peerCertificates(c); len(chain) > 0 {
		id, err := s.verifyMachineCert(c, chain, renewal)
		if err != nil {
			return nil, err
		}
		cert, name, enrolment = id, id.Machine, id.Enrolment
	} else {
		tok, err := bearer(c)
		if err != nil {
			return nil, err
		}
		claims, err := s.Auth.ParseHost(tok)
		if err != nil {
			// On the record, by the address it came from (the machine a
			// token of another key names is only its claim), as a
			// certificate of another CA is: a fleet whose controller was
			// set up again with new keys went silent, the record saying
			// nothing of why.
			ip := c.RealIP()
			_ = s.refusals.Record(c.Request().Context(), s.Store.Audit, ip+"\x00host-token",
				auth.Row{Actor: "anonymous", Action: "host-refused", Target: "address/" + ip, Of: "host tokens refused from " + ip},
				fmt.Sprintf("a host token this controller did not sign, or no host token (from %s): %v", ip, err))
			return nil, err
		}
		name, enrolment, bearerOnly = claims.Subject, claims.ID, true
		if err := s.bearerPast(name); err != nil {
			s.recordRefusal(c, name, "bearer", err.Error())
			return nil, err
		}
	}
	if s.Auth.Revoked.Revoked(enrolment) {
		err := fmt.Errorf("%w: machine %s was revoked (or deleted): its token and certificates are refused; "+
			"delete it and enrol the machine again to bring it back", models.ErrUnauthorized, name)
		s.recordRefusal(c, name, "revoked", err.Error())
		return nil, err
	}
	if bearerOnly && s.Auth.Revoked.Revoked(models.BearerRevocationID(enrolment)) {
		err := fmt.Errorf("%w: machine %s was enrolled with a machine certificate: its host token alone is refused, so a copy of host.json is not the machine; "+
			"the host presents its certificate (machine.pem), and one that lost it enrols again", models.ErrUnauthorized, name)
		s.recordRefusal(c, name, "bearer-only", err.Error())
		return nil, err
	}
	id, ok := s.Hub.Authorize(name, enrolment)
	if !ok {
		// Enrolled through another instance since this one loaded:
		// the store decides, and the hub learns the machine.
		m, err := s.Store.Machine(c.Request().Context(), name)
		if err != nil || m.TokenID != enrolment {
			// A token or certificate the controller made, for a machine the
			// store does not have as that enrolment (deleted, enrolled
			// again, a store restored from before it): on the record.
			err := fmt.Errorf("%w: host token or certificate of machine %s is not known here", models.ErrUnauthorized, name)
			s.recordRefusal(c, name, "unknown", err.Error())
			return nil, err
		}
		s.Hub.Add(m)
		id = m.ID
	}
	if cert != nil && s.Hub.CertInUse(id) != cert.Serial {
		// A certificate this instance has not seen the host present: its
		// first use is recorded (retiring the one used before), or it is
		// one that a newer, presented since, replaced. Once per
		// certificate and instance; every later request needs no store.
		inUse, err := s.Service.CertInUse(c.Request().Context(), name, enrolment, cert)
		if err != nil {
			s.recordRefusal(c, name, "replaced", err.Error())
			closeAfter(c)
			return nil, err
		}
		if inUse == cert.Serial {
			s.Hub.SetCertInUse(id, inUse)
		}
	}
	conns.Known(c.Request(), "machine", name) // a host's connection never makes room past the cap
	return &Principal{Machine: name, hostID: id, enrolment: enrolment, cert: cert}, nil
}

// requireHostOrViewer lets a host or any person through (blobs).
func (s *Server) requireHostOrViewer(next echo.HandlerFunc) echo.HandlerFunc {
	host := s.requireHost(next)
	person := s.requireRole(models.RoleViewer)(next)
	return func(c echo.Context) error {
		if len(peerCertificates(c)) > 0 {
			return host(c)
		}
		tok, err := bearer(c)
		if err != nil {
			return err
		}
		if _, err := s.Auth.ParseHost(tok); err == nil {
			return host(c)
		}
		// Blobs are a host path over plain HTTP, for hosts moving to TLS;
		// a person's token is not taken there, as on every other route.
		if err := s.inTheClear(c); err != nil {
			return err
		}
		return person(c)
	}
}

// closeAfter closes the connection once its answer is written: a host's
// kept connection goes on presenting the certificate it was made with, so
// one refused as replaced would be refused on it again and again, where a
// new connection presents the host's newest.
func closeAfter(c echo.Context) {
	c.Response().Header().Set(echo.HeaderConnection, "close")
}
