package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/meshca"
	"mesh/models"
)

// The move of hosts enrolled over plain HTTP to TLS, without a flag day.
// While --host-bearer-until has not passed, a controller serving TLS also
// serves the host protocol, and only it, over plain HTTP on the same port
// (the listener looks at each connection's first byte), to hosts that
// name themselves by their bearer token. Every such answer carries
// X-Mesh-TLS: the controller's https:// address for the URL the host
// used. A host of this release that sees it fetches the mesh CA
// (GET /api/v1/host/ca, signed by the declaration key it trusts since
// enrolment), asks for its certificate over TLS with its token, rewrites
// its URLs to https:// and goes on over TLS. Past the date, bearer-only
// hosts are refused with a message saying how to move.

// HeaderTLS is the https:// address a controller serving TLS gives a host
// that reached it over plain HTTP.
const HeaderTLS = "X-Mesh-TLS"

// PlainHosts is the plain-HTTP service to hosts not yet on TLS.
type PlainHosts struct {
	// On: the listener serves plain HTTP beside TLS.
	On bool
	// Until: past it, a host naming itself by its bearer token alone is
	// refused (over TLS too); zero: never.
	Until time.Time
}

// hostPlainPaths are what a plain request may reach.
func hostPlainPath(p string) bool {
	return strings.HasPrefix(p, "/api/v1/host/") || strings.HasPrefix(p, "/api/v1/blobs/") || p == "/healthz" || p == "/readyz"
}

// bearerPast is the refusal of a bearer-only host past the date.
func (s *Server) bearerPast(machine string) error {
	if s.Plain.Until.IsZero() || !s.Now().After(s.Plain.Until) {
		return nil
	}
	return fmt.Errorf("%w: machine %s: hosts without a machine certificate are refused since %s (--host-bearer-until); "+
		"to move it, enrol it again over TLS: mesh-host enroll --controller https://… --ca-pin %s (a join token's command gives both), "+
		"or, before that date, roll out a mesh-host release that moves to TLS by itself",
		models.ErrUnauthorized, machine, s.Plain.Until.UTC().Format(time.RFC3339), s.caPin())
}

func (s *Server) caPin() string {
	if s.Service != nil && s.Service.Certs.CA != nil {
		return s.Service.Certs.CA.Pin()
	}
	return "sha256:…"
}

// inTheClear refuses what a person sends over plain HTTP to a listener
// that serves TLS too, saying where TLS is; nil over TLS, or where plain
// HTTP is all the controller serves.
func (s *Server) inTheClear(c echo.Context) error {
	r := c.Request()
	if !s.Plain.On || r.TLS != nil {
		return nil
	}
	return fmt.Errorf("%w: over plain HTTP this controller serves only hosts that are moving to TLS; use %s",
		models.ErrForbidden, "https://"+r.Host)
}

// plainHTTP lets a request that came over plain HTTP, on a listener that
// serves TLS too, reach the host protocol only (sessions, passwords and
// join tokens never travel in the clear there), and tells the host where
// TLS is.
func (s *Server) plainHTTP(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !s.Plain.On || r.TLS != nil {
			return next(c)
		}
		if !hostPlainPath(r.URL.Path) {
			return s.inTheClear(c)
		}
		c.Response().Header().Set(HeaderTLS, "https://"+r.Host)
		return next(c)
	}
}

// CAView is the mesh CA as a host fetches it to move to TLS: signed by the
// declaration key, so a host that trusts only that key (enrolled over plain
// HTTP) can trust the CA.
type CAView struct {
	Certificate string `json:"certificate"`
	Pin         string `json:"pin"`
	KeyID       string `json:"key_id"`
	Signature   []byte `json:"signature"`
}

// getCA answers the mesh CA, signed (host token or certificate).
func (s *Server) getCA(c echo.Context) error {
	if s.Service == nil || s.Service.Certs.CA == nil || !s.TLS {
		return fmt.Errorf("%w: this controller serves no TLS", models.ErrNotFound)
	}
	ca := s.Service.Certs.CA
	pemCA := ca.PEM()
	return c.JSON(http.StatusOK, CAView{Certificate: string(pemCA), Pin: ca.Pin(), KeyID: s.Signer.KeyID(),
		Signature: s.Signer.Sign(meshca.CAStatement(pemCA))})
}
