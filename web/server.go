// Package web is the dashboard: templ components rendered on the server,
// htmx for live fragments, static assets embedded. Every badge is computed
// from recorded facts (generations, sends, reports, checks) and says when
// it was last true.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"mesh/auth"
	"mesh/conns"
	"mesh/models"
	"mesh/service"
)

//go:generate go tool templ generate

//go:embed static
var staticFS embed.FS

// htmx request and response headers.
const (
	HeaderHXRequest = "HX-Request"
	HeaderHXTrigger = "HX-Trigger"
)

// SessionCookie carries a person's JWT.
const SessionCookie = "mesh_session"

// Seen says when a machine's host was last seen (the hub knows best).
type Seen interface {
	LastSeen(id int64) *time.Time
}

// Server is the dashboard.
type Server struct {
	Store    Store
	Service  *service.Service
	Seen     Seen
	Auth     *auth.Authority
	Signer   models.Signer
	Instance string
	Log      *slog.Logger

	// Rules say machine states (the controller's thresholds).
	Rules models.StateRules

	// Behind says why this controller is behind its store.
	Behind *models.Behind

	// KeepSends is how long sends, reports and declarations are kept
	// (--keep-sends; 0: for ever), said with how far back the record goes.
	KeepSends time.Duration

	// TrustedProxies are the reverse proxies whose X-Forwarded-Proto and
	// X-Forwarded-Host are believed (cookies are Secure when such a proxy
	// says the person came over https). None by default.
	TrustedProxies []netip.Prefix

	assets  map[string]asset // by hashed name
	names   map[string]string
	csrfKey []byte
}

type asset struct {
	body  []byte
	ctype string
}

// NewServer makes the dashboard and hashes its assets.
func NewServer(st Store, seen Seen, auth *auth.Authority, signer models.Signer, instance string, log *slog.Logger) *Server {
	s := &Server{Store: st, Seen: seen, Rules: models.DefaultStateRules, Auth: auth, Signer: signer, Instance: instance, Log: log,
		assets: map[string]asset{}, names: map[string]string{}}
	if auth != nil {
		s.csrfKey = newCSRFKey(auth.Priv)
	} else {
		s.csrfKey = newCSRFKey(nil)
	}
	_ = fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := staticFS.ReadFile(p)
		sum := sha256.Sum256(b)
		base := path.Base(p)
		ext := path.Ext(base)
		hashed := strings.TrimSuffix(base, ext) + "." + hex.EncodeToString(sum[:6]) + ext
		ct := "application/octet-stream"
		switch ext {
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		s.assets[hashed] = asset{body: b, ctype: ct}
		s.names[base] = "/static/" + hashed
		return nil
	})
	return s
}

// Asset is the content-hashed URL of a static file.
func (s *Server) Asset(name string) string { return s.names[name] }

// Register adds the dashboard's routes to e.
func (s *Server) Register(e *echo.Echo) {
	e.GET("/static/:name", s.static)
	e.GET("/favicon.ico", s.favicon)
	// CSRF protection on every dashboard route (a token bound to the
	// session, and a refusal of what the browser says came from another
	// site: see csrf); the API takes bearer tokens and needs none.
	csrf := s.csrf
	viewer := []echo.MiddlewareFunc{csrf, s.session(models.RoleViewer)}
	operator := []echo.MiddlewareFunc{csrf, s.session(models.RoleOperator)}
	e.GET("/login", s.loginPage, csrf)
	e.POST("/login", s.login, csrf)
	e.POST("/logout", s.logout, csrf)
	e.GET("/", s.overview, viewer...)
	e.GET("/ui/machines", s.overviewFragment, viewer...)
	e.GET("/machines/:name", s.machinePage, viewer...)
	e.GET("/ui/machines/:name/status", s.machineStatus, viewer...)
	e.POST("/machines/:name/assignments", s.saveAssignments, operator...)
	e.POST("/machines/:name/variables", s.saveVariables, operator...)
	e.POST("/machines/:name/push", s.push, operator...)
	e.GET("/modules", s.modulesPage, viewer...)
	e.POST("/modules/:module/current", s.promote, operator...)
	e.GET("/plans", s.plansPage, viewer...)
	e.GET("/plans/:id", s.planPage, viewer...)
	for _, a := range []string{models.PlanPause, models.PlanResume, models.PlanCancel, models.PlanRollback} {
		e.POST("/plans/:id/"+a, s.planAction(a), operator...)
	}
	e.GET("/releases", s.releasesPage, viewer...)
	e.GET("/releases/:version/rollout", s.rolloutPage, viewer...)
	e.GET("/instances", s.instancesPage, viewer...)
	e.GET("/audit", s.auditPage, viewer...)
}

// static serves content-hashed assets, cached for a year.
func (s *Server) static(c echo.Context) error {
	a, ok := s.assets[c.Param("name")]
	if !ok {
		return echo.NewHTTPError(http.StatusNotFound)
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	return c.Blob(http.StatusOK, a.ctype, a.body)
}

// favicon answers browsers that ask /favicon.ico without reading the
// layout's icon link (a JSON answer opened in a tab, say).
func (s *Server) favicon(c echo.Context) error {
	b, err := staticFS.ReadFile("static/favicon.svg")
	if err != nil {
		return echo.NewHTTPError(http.StatusNotFound)
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=86400")
	return c.Blob(http.StatusOK, "image/svg+xml", b)
}

// viewer is who is looking, with their CSRF token.
type viewer struct {
	User string
	Role string
	CSRF string
}

func (v viewer) can(role string) bool { return models.RoleRank(v.Role) >= models.RoleRank(role) }

const viewerKey = "mesh.web.viewer"

// session lets a person with a valid session cookie and at least role min
// through; others are sent to the login page (or refused, for a change).
func (s *Server) session(min string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ck, err := c.Cookie(SessionCookie)
			var claims *auth.PersonClaims
			if err == nil {
				claims, err = s.Auth.ParsePerson(ck.Value)
			}
			if err == nil && claims.Kind == auth.KindAPIToken {
				// The dashboard's session is a login's: an API token set
				// as its cookie acted as its owner's login on the record
				// (a CI job's token is not the same hand), and logging it
				// out revoked it as a session while its list said active.
				err = errors.New("an API token is no dashboard session")
			}
			if err != nil {
				if c.Request().Method == http.MethodGet {
					if c.Request().Header.Get(HeaderHXRequest) != "" {
						c.Response().Header().Set("HX-Redirect", "/login")
						return c.NoContent(http.StatusUnauthorized)
					}
					return c.Redirect(http.StatusSeeOther, "/login")
				}
				// The person's own form (its token matched the cookie), of
				// a session revoked or expired since: what they typed is
				// shown to copy.
				return s.render(c, http.StatusUnauthorized, SessionEndedPage(s.page(c, "Session ended"), typedFields(c)))
			}
			if models.RoleRank(claims.Role) < models.RoleRank(min) {
				return s.errorPage(c, http.StatusForbidden, fmt.Sprintf("Your role (%s) cannot do this; it needs %s.", claims.Role, min))
			}
			conns.Known(c.Request(), "person", claims.Subject) // a person's connection never makes room past the cap
			csrf, _ := c.Get(csrfCtxKey).(string)
			c.Set(viewerKey, viewer{User: claims.Subject, Role: claims.Role, CSRF: csrf})
			return next(c)
		}
	}
}

func who(c echo.Context) viewer {
	v, _ := c.Get(viewerKey).(viewer)
	if v.CSRF == "" {
		v.CSRF, _ = c.Get(csrfCtxKey).(string)
	}
	return v
}

// render writes a component through a buffer, so a failed render never
// sends half a 200.
func (s *Server) render(c echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	if err := comp.Render(c.Request().Context(), &buf); err != nil {
		s.Log.Error("render", "err", err, "path", c.Path())
		return echo.NewHTTPError(http.StatusInternalServerError, "internal error")
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.HTMLBlob(status, buf.Bytes())
}

func (s *Server) errorPage(c echo.Context, status int, msg string) error {
	return s.errorPageBack(c, status, msg, "/", "Back to the machines")
}

// errorPageBack is errorPage with the link back to where the person was
// (a plan's page after an act it refused).
func (s *Server) errorPageBack(c echo.Context, status int, msg, backTo, backWords string) error {
	return s.render(c, status, ErrorPage(s.page(c, "Error"), status, msg, backTo, backWords))
}

// page is what every page's layout needs.
func (s *Server) page(c echo.Context, title string) Page {
	return Page{Title: title, Viewer: who(c), CSS: s.Asset("mesh.css"), Icon: s.Asset("favicon.svg"), HTMX: s.Asset("htmx.min.js"), Path: c.Request().URL.Path, Behind: s.Behind.Why()}
}

func (s *Server) loginPage(c echo.Context) error {
	return s.render(c, http.StatusOK, LoginPage(s.page(c, "Log in"), "", ""))
}

func (s *Server) login(c echo.Context) error {
	user, pw := c.FormValue("username"), c.FormValue("password")
	tok, exp, err := s.Service.Login(c.Request().Context(), user, pw, c.RealIP())
	var ra *models.RetryAfterError
	switch {
	case errors.Is(err, models.ErrUnauthorized):
		return s.render(c, http.StatusUnauthorized, LoginPage(s.page(c, "Log in"), user, "Wrong user name or password."))
	case errors.As(err, &ra):
		status := http.StatusServiceUnavailable
		if errors.Is(err, models.ErrTooManyRequests) {
			status = http.StatusTooManyRequests
		}
		c.Response().Header().Set("Retry-After", strconv.Itoa(max(1, int(ra.After.Seconds()))))
		return s.render(c, status, LoginPage(s.page(c, "Log in"), user, problemText(err)))
	}
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{Name: SessionCookie, Value: tok, Path: "/", Expires: exp, HttpOnly: true,
		Secure: s.secure(c), SameSite: http.SameSiteStrictMode})
	return c.Redirect(http.StatusSeeOther, "/")
}

func (s *Server) logout(c echo.Context) error {
	if ck, err := c.Cookie(SessionCookie); err == nil {
		// An API token set as the cookie is no session, and a logout does
		// not revoke it: it did, as a session, while its list said active.
		if claims, err := s.Auth.ParsePerson(ck.Value); err == nil && claims.ExpiresAt != nil && claims.Kind != auth.KindAPIToken {
			if err := s.Service.Logout(c.Request().Context(), "user:"+claims.Subject, claims.ID, claims.ExpiresAt.Time); err != nil {
				return err // the session must not outlive a logout that did not take
			}
		}
	}
	c.SetCookie(&http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: s.secure(c), SameSite: http.SameSiteStrictMode})
	return c.Redirect(http.StatusSeeOther, "/login")
}

// problemText is an error as a sentence for a person.
func problemText(err error) string {
	var inv *models.InvalidError
	switch {
	case errors.As(err, &inv):
		return inv.Error()
	case errors.Is(err, models.ErrNotFound), errors.Is(err, models.ErrConflict), errors.Is(err, models.ErrDowngrade),
		errors.Is(err, models.ErrStaleGeneration), errors.Is(err, models.ErrMachineConflict), errors.Is(err, models.ErrTooManyRequests):
		return err.Error()
	case errors.Is(err, models.ErrUnavailable):
		// Not the driver's words: they name the database and its address.
		return "The store is unavailable; try again shortly."
	}
	return "internal error"
}
