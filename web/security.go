package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"maps"
	"mesh/models"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// Cookie and field names of the CSRF check.
const (
	// PreSessionCookie binds the login form's CSRF token before there is a
	// session: a random value, and the token is its HMAC.
	PreSessionCookie = "mesh_csrf"
	// CSRFField is the form field, CSRFHeader the htmx header, that carry
	// the token.
	CSRFField  = "_csrf"
	CSRFHeader = "X-CSRF-Token"
)

const csrfCtxKey = "mesh.web.csrf"

// ContentSecurityPolicy admits only this origin's scripts, styles and
// images (and data: images), and no framing. The templates carry no inline
// script or style; htmx's own inline indicator style is turned off in the
// layout's htmx-config.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// SecurityHeaders sets the browser hardening headers on every response,
// pages, fragments and API answers alike (one map write each: cheap).
func SecurityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		return next(c)
	}
}

// ParseTrustedProxies reads a comma-separated list of CIDR prefixes or
// bare addresses (one address is its own /32 or /128).
func ParseTrustedProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: not an address or CIDR prefix", f)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// RealIP is the echo IP extractor that believes X-Forwarded-For only from
// the trusted proxies (echo's default believes any client, and its XFF
// extractor trusts loopback and private networks unless told not to).
func RealIP(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// fromTrustedProxy says whether the request's peer is a trusted proxy,
// whose X-Forwarded-Proto and X-Forwarded-Host are believed.
func (s *Server) fromTrustedProxy(r *http.Request) bool {
	if len(s.TrustedProxies) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range s.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// secure says whether the person reached us over TLS: directly, or
// through a trusted proxy that says so. Cookies are Secure then.
func (s *Server) secure(c echo.Context) bool {
	r := c.Request()
	return r.TLS != nil || (s.fromTrustedProxy(r) && strings.EqualFold(r.Header.Get(echo.HeaderXForwardedProto), "https"))
}

// origin is this dashboard's own scheme://host as the browser sees it.
func (s *Server) origin(c echo.Context) string {
	r := c.Request()
	scheme, host := "http", r.Host
	if s.secure(c) {
		scheme = "https"
	}
	if h := r.Header.Get("X-Forwarded-Host"); h != "" && s.fromTrustedProxy(r) {
		host = h
	}
	return scheme + "://" + strings.ToLower(host)
}

// crossOrigin says why a state-changing request came from another site
// ("" when it did not, or when the browser sent neither Sec-Fetch-Site nor
// Origin: curl and old browsers, left to the token).
func (s *Server) crossOrigin(c echo.Context) string {
	r := c.Request()
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Sprintf("Your browser says this request came from another site (Sec-Fetch-Site: %s), so it was refused. Use the dashboard's own pages to make changes.", site)
	}
	o := r.Header.Get(echo.HeaderOrigin)
	if o == "" {
		return ""
	}
	if own := s.origin(c); !strings.EqualFold(o, own) {
		msg := fmt.Sprintf("This request came from %s, not from this dashboard (%s), so it was refused.", o, own)
		if strings.HasPrefix(own, "http://") && strings.EqualFold(o, "https://"+strings.TrimPrefix(own, "http://")) {
			msg += " If a TLS proxy is in front of the controller, start it with --trusted-proxies naming that proxy."
		}
		return msg
	}
	return ""
}

// csrfToken is the CSRF token of the request's session: an HMAC of the
// session cookie (so a token minted for one session fails for another),
// or, before a login, of the pre-session cookie. ok is false when there is
// neither cookie.
func (s *Server) csrfToken(c echo.Context) (tok string, ok bool) {
	if ck, err := c.Cookie(SessionCookie); err == nil && ck.Value != "" {
		return s.mac("session", ck.Value), true
	}
	if ck, err := c.Cookie(PreSessionCookie); err == nil && ck.Value != "" {
		return s.mac("pre-session", ck.Value), true
	}
	return "", false
}

func (s *Server) mac(kind, value string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrf guards every dashboard route. A safe request gets the token its
// forms will carry (and a pre-session cookie when it has no cookie to bind
// to). A state-changing one is refused when the browser says it came from
// another site, and otherwise must carry the token of its own session.
func (s *Server) csrf(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		// A page's address is text, as the API's is: a NUL or bytes not
		// UTF-8 in a name or a filter was answered by each store its own
		// way (SQLite a 404 or an empty page, PostgreSQL a 400).
		if why := addressText(c); why != "" {
			return s.errorPage(c, http.StatusBadRequest, why)
		}
		tok, ok := s.csrfToken(c)
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			if !ok {
				v := rand.Text()
				c.SetCookie(&http.Cookie{Name: PreSessionCookie, Value: v, Path: "/", HttpOnly: true,
					Secure: s.secure(c), SameSite: http.SameSiteStrictMode})
				tok = s.mac("pre-session", v)
			}
			c.Set(csrfCtxKey, tok)
			return next(c)
		}
		if why := s.crossOrigin(c); why != "" {
			return s.errorPage(c, http.StatusForbidden, why)
		}
		if r.URL.RawQuery != "" {
			// The handlers read their fields with FormValue, which takes
			// the URL's query too: a field there skipped formText's check
			// of the body (bytes not UTF-8 were stored), and a token there
			// is one a log or a Referer may keep. No form of this
			// dashboard posts to a URL with a query.
			return s.errorPage(c, http.StatusBadRequest, "A form's fields come in its body, not in the URL's query; nothing was changed.")
		}
		sent := r.Header.Get(CSRFHeader)
		if sent == "" {
			sent = c.FormValue(CSRFField)
		}
		if !ok || sent == "" || !hmac.Equal([]byte(sent), []byte(tok)) {
			if ok && sent != "" && r.URL.Path != "/login" {
				// A form of this dashboard (the request carries one of its
				// cookies, which are SameSite=Strict: no other site's form
				// sends them) whose session has ended since (logged out,
				// expired, logged in again elsewhere): said so, with what
				// was typed to copy, rather than "reload the page", which
				// lost it.
				return s.render(c, http.StatusForbidden, SessionEndedPage(s.page(c, "Session ended"), typedFields(c)))
			}
			return s.errorPage(c, http.StatusForbidden, "This form has expired or did not come from this dashboard (CSRF check failed). Reload the page and try again.")
		}
		if why := formText(r); why != "" {
			return s.errorPage(c, http.StatusBadRequest, why)
		}
		c.Set(csrfCtxKey, tok)
		return next(c)
	}
}

// addressText says why a request's path parameters or query values are
// not text, or "".
func addressText(c echo.Context) string {
	names, values := c.ParamNames(), c.ParamValues()
	for i := range min(len(names), len(values)) {
		if why := models.NotText(values[i]); why != "" {
			return fmt.Sprintf("The address's %s is %s; nothing was read.", names[i], why)
		}
	}
	for name, vs := range c.QueryParams() {
		for _, v := range vs {
			if why := models.NotText(v); why != "" {
				return fmt.Sprintf("The address's %q is %s; nothing was read.", models.EscapeLogLine(name, 100), why)
			}
		}
	}
	return ""
}

// formText says why a form's fields cannot be taken as text, as the API
// refuses such a body: bytes that are not UTF-8 (read back as U+FFFD, so
// what was stored would not be what was sent) or a NUL (which PostgreSQL
// cannot store and SQLite would): "" when every field is text. The form
// was parsed by the CSRF check above.
func formText(r *http.Request) string {
	fields := r.PostForm
	if r.MultipartForm != nil {
		fields = r.MultipartForm.Value
	}
	for name, vs := range fields {
		for _, v := range vs {
			switch {
			case !utf8.ValidString(v):
				return fmt.Sprintf("The field %q is not valid UTF-8; nothing was changed.", name)
			case strings.IndexByte(v, 0) >= 0:
				return fmt.Sprintf("The field %q holds a NUL character; nothing was changed.", name)
			}
		}
	}
	return ""
}

// newCSRFKey derives the CSRF key from the token authority's private key,
// so every instance of the controller computes the same tokens.
func newCSRFKey(priv []byte) []byte {
	if len(priv) == 0 {
		// No authority (benchmarks): a key of this process.
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		return k
	}
	m := hmac.New(sha256.New, priv)
	m.Write([]byte("mesh web csrf v1"))
	return m.Sum(nil)
}

// typedFields are a refused form's fields as "name: value" lines, but its
// token, for the person to copy.
func typedFields(c echo.Context) []string {
	form, err := c.FormParams()
	if err != nil {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(form)) {
		// Never the login's password (its path is not shown this page
		// either) nor the token.
		if k == CSRFField || k == "password" {
			continue
		}
		for _, v := range form[k] {
			if strings.TrimSpace(v) != "" {
				out = append(out, k+": "+v)
			}
		}
	}
	return out
}
