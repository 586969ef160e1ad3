package api

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"

	"mesh/models"
)

// JWT audiences: a host's token and a person's can never stand in for each
// other, because each parser accepts exactly one audience.
const (
	Issuer           = "mesh-controller"
	AudienceOperator = "mesh-operator"
	AudienceHost     = "mesh-host"
	// PersonTokenTTL is how long a login lasts.
	PersonTokenTTL = 12 * time.Hour
)

// Authority issues and checks JWTs with the controller's token key. The
// algorithm is pinned to EdDSA: a token that says HS256 (say, keyed with
// the public key) or none is refused before its signature is looked at.
type Authority struct {
	KeyID string
	Priv  ed25519.PrivateKey
	Now   func() time.Time

	// verified remembers host tokens whose signature checked out. A host
	// polls every minute with the same token; verifying it each time would
	// cost a signature check per poll. Host tokens do not expire; they are
	// revoked through the token id the hub checks on every request.
	mu       sync.Mutex
	verified map[string]*HostClaims
}

// maxVerified bounds the verified-token memory; past it, it starts over.
const maxVerified = 200_000

// PersonClaims are a person's token claims.
type PersonClaims struct {
	Role string `json:"role"`
	jwt.RegisteredClaims
}

// HostClaims are a host's token claims: the machine is the subject, the
// token id lets an admin revoke it by re-enrolling.
type HostClaims struct {
	jwt.RegisteredClaims
}

// IssuePerson makes a person's token.
func (a *Authority) IssuePerson(user, role string) (string, time.Time, error) {
	now := a.Now()
	exp := now.Add(PersonTokenTTL)
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, PersonClaims{Role: role, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: user, Audience: jwt.ClaimStrings{AudienceOperator},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
	}})
	t.Header["kid"] = a.KeyID
	s, err := t.SignedString(a.Priv)
	return s, exp, err
}

// IssueHost makes a host's token for a machine. It has no expiry: a host
// must keep working through any outage; it is revoked with its machine.
func (a *Authority) IssueHost(machine, tokenID string) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, HostClaims{RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: machine, Audience: jwt.ClaimStrings{AudienceHost},
		IssuedAt: jwt.NewNumericDate(a.Now()), ID: tokenID,
	}})
	t.Header["kid"] = a.KeyID
	return t.SignedString(a.Priv)
}

func (a *Authority) keyFunc(t *jwt.Token) (any, error) {
	return a.Priv.Public(), nil
}

// ParsePerson checks a person's token.
func (a *Authority) ParsePerson(s string) (*PersonClaims, error) {
	var c PersonClaims
	_, err := jwt.ParseWithClaims(s, &c, a.keyFunc,
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithAudience(AudienceOperator), jwt.WithIssuer(Issuer),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(a.Now), jwt.WithLeeway(30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", models.ErrUnauthorized, err)
	}
	if !models.ValidRole(c.Role) || c.Subject == "" {
		return nil, fmt.Errorf("%w: token has no valid role", models.ErrUnauthorized)
	}
	return &c, nil
}

// ParseHost checks a host's token.
func (a *Authority) ParseHost(s string) (*HostClaims, error) {
	a.mu.Lock()
	c, ok := a.verified[s]
	a.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := a.parseHost(s)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.verified == nil || len(a.verified) >= maxVerified {
		a.verified = map[string]*HostClaims{}
	}
	a.verified[s] = c
	a.mu.Unlock()
	return c, nil
}

func (a *Authority) parseHost(s string) (*HostClaims, error) {
	var c HostClaims
	_, err := jwt.ParseWithClaims(s, &c, a.keyFunc,
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithAudience(AudienceHost), jwt.WithIssuer(Issuer), jwt.WithTimeFunc(a.Now))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", models.ErrUnauthorized, err)
	}
	if c.Subject == "" || c.ID == "" {
		return nil, fmt.Errorf("%w: host token names no machine", models.ErrUnauthorized)
	}
	return &c, nil
}

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
	hostID  int64
}

// Actor is how the audit log names the principal.
func (p *Principal) Actor() string {
	if p.Machine != "" {
		return "host:" + p.Machine
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
			c.Set(principalKey, &Principal{User: claims.Subject, Role: claims.Role})
			return next(c)
		}
	}
}

// requireHost lets a host through. It checks the token against the hub's
// memory, never the store, so an idle poll costs the store nothing.
func (s *Server) requireHost(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		tok, err := bearer(c)
		if err != nil {
			return err
		}
		claims, err := s.Auth.ParseHost(tok)
		if err != nil {
			return err
		}
		id, ok := s.Hub.Authorize(claims.Subject, claims.ID)
		if !ok {
			// Enrolled through another instance since this one loaded:
			// the store decides, and the hub learns the machine.
			m, err := s.Store.Machine(c.Request().Context(), claims.Subject)
			if err != nil || m.TokenID != claims.ID {
				return fmt.Errorf("%w: host token of machine %s is not known here", models.ErrUnauthorized, claims.Subject)
			}
			s.Hub.Add(m)
			id = m.ID
		}
		c.Set(principalKey, &Principal{Machine: claims.Subject, hostID: id})
		return next(c)
	}
}

// requireHostOrViewer lets a host or any person through (blobs).
func (s *Server) requireHostOrViewer(next echo.HandlerFunc) echo.HandlerFunc {
	host := s.requireHost(next)
	person := s.requireRole(models.RoleViewer)(next)
	return func(c echo.Context) error {
		tok, err := bearer(c)
		if err != nil {
			return err
		}
		if _, err := s.Auth.ParseHost(tok); err == nil {
			return host(c)
		}
		return person(c)
	}
}
