package web_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controller"
	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/web"
)

// postWith posts a form with extra request headers, as a browser (or a
// forger) would send them.
func (b *browser) postWith(path string, form url.Values, header map[string]string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// assignments counts m1's stored assignments.
func assignments(e *ctltest.Env) int {
	var as struct{ Assignments []any }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
	return len(as.Assignments)
}

// TestCSRF_TokenOfAnotherSessionRefused: a sibling origin that can set
// cookies plants session A's CSRF cookie in B's browser and posts A's
// token. The double-submit check took it (cookie and field agreed); a
// token bound to the session does not.
func TestCSRF_TokenOfAnotherSessionRefused(t *testing.T) {
	e, a, _ := fixture(t)
	a.get("/machines/m1")
	// Another operator: a person's JWT has no id of its own, so two logins
	// of one user in the same second are one session.
	e.AddUser("otto", "operator")
	b := newBrowser(t, e.URL)
	b.login("otto", "password-of-otto")
	u, _ := url.Parse(e.URL)
	var tossed []*http.Cookie
	for _, ck := range a.c.Jar.Cookies(u) {
		if ck.Name != web.SessionCookie {
			tossed = append(tossed, &http.Cookie{Name: ck.Name, Value: ck.Value, Path: "/"})
		}
	}
	b.c.Jar.SetCookies(u, tossed)
	form := url.Values{"generation": {"1"}, "m_node-tools": {"on"}, "_csrf": {a.csrf}}
	if resp, body := b.postWith("/machines/m1/assignments", form, nil); resp.StatusCode != 403 || !strings.Contains(body, "CSRF") {
		t.Fatalf("session B with session A's token: %d, want 403 saying CSRF", resp.StatusCode)
	}
	if n := assignments(e); n != 0 {
		t.Fatal("the refused change was stored")
	}
	b.get("/machines/m1")
	if st, loc := b.post("/machines/m1/assignments", url.Values{"generation": {"1"}, "m_node-tools": {"on"}}, true); st != 303 {
		t.Fatalf("session B with its own token: %d %s", st, loc)
	}
}

// TestCSRF_CrossSiteRefusedWithValidToken: what the browser says came
// from another site is refused, whatever token it carries, with a page
// that says why; the dashboard's own origin passes.
func TestCSRF_CrossSiteRefusedWithValidToken(t *testing.T) {
	e, op, _ := fixture(t)
	op.get("/machines/m1")
	form := url.Values{"generation": {"1"}, "m_node-tools": {"on"}, "_csrf": {op.csrf}}
	for _, c := range []struct {
		name   string
		header map[string]string
		why    string
	}{
		{"SecFetchSiteCrossSite", map[string]string{"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site: cross-site"},
		{"SecFetchSiteSameSite", map[string]string{"Sec-Fetch-Site": "same-site"}, "Sec-Fetch-Site: same-site"},
		{"OriginEvil", map[string]string{"Origin": "https://evil.example"}, "came from https://evil.example, not from this dashboard"},
		{"OriginOtherScheme", map[string]string{"Origin": strings.Replace(e.URL, "http://", "https://", 1)}, "not from this dashboard"},
		{"OriginNull", map[string]string{"Origin": "null"}, "came from null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := op.postWith("/machines/m1/assignments", form, c.header)
			if resp.StatusCode != 403 || !strings.Contains(body, c.why) {
				t.Fatalf("%d, want 403 saying %q:\n%.300s", resp.StatusCode, c.why, body)
			}
		})
	}
	if n := assignments(e); n != 0 {
		t.Fatal("a cross-site change was stored")
	}
	t.Run("LoginFromEvil", func(t *testing.T) {
		anon := newBrowser(t, e.URL)
		anon.get("/login")
		resp, _ := anon.postWith("/login", url.Values{"username": {"olga"}, "password": {"password-of-olga"}, "_csrf": {anon.csrf}},
			map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
		if resp.StatusCode != 403 {
			t.Fatalf("a cross-site login: %d, want 403", resp.StatusCode)
		}
	})
	t.Run("SameOrigin", func(t *testing.T) {
		resp, _ := op.postWith("/machines/m1/assignments", form, map[string]string{"Origin": e.URL, "Sec-Fetch-Site": "same-origin"})
		if resp.StatusCode != 303 || assignments(e) != 1 {
			t.Fatalf("a same-origin change: %d", resp.StatusCode)
		}
	})
}

// startBehindProxy runs a controller that trusts loopback as its reverse
// proxy, with an admin token.
func startBehindProxy(t *testing.T) *ctltest.Env {
	t.Helper()
	sc := storetest.Config(t, store.SQLite)
	var out bytes.Buffer
	proxies, err := web.ParseTrustedProxies("127.0.0.0/8, ::1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.Start(context.Background(), controller.Config{Listen: "127.0.0.1:0", DataDir: sc.DataDir, Out: &out,
		DrainTimeout: 5 * time.Second, Log: slog.New(slog.DiscardHandler), TrustedProxies: proxies})
	if err != nil {
		t.Fatal(err)
	}
	e := &ctltest.Env{T: t, Ctl: c, URL: c.URL(), HTTP: http.DefaultClient}
	t.Cleanup(e.Stop)
	m := regexp.MustCompile(`password: (\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no admin password in %q", out.String())
	}
	e.Admin = e.Login("admin", m[1])
	return e
}

// setCookie finds the named cookie a response sets.
func setCookie(resp *http.Response, name string) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

// TestCookies_SecureOnlyWhenATrustedProxySaysHTTPS: behind a TLS proxy the
// cookies are Secure; the same header from anyone else changes nothing,
// and neither does X-Forwarded-For (the audit keeps the peer's address).
func TestCookies_SecureOnlyWhenATrustedProxySaysHTTPS(t *testing.T) {
	for _, c := range []struct {
		name    string
		start   func(*testing.T) *ctltest.Env
		secure  bool
		auditIP string
	}{
		{"TrustedProxy", startBehindProxy, true, "203.0.113.9"},
		{"Untrusted", func(t *testing.T) *ctltest.Env { return ctltest.Start(t, store.SQLite) }, false, "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := c.start(t)
			e.AddUser("olga", "operator")
			proxied := map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9",
				"X-Forwarded-Host": strings.TrimPrefix(e.URL, "http://")}
			req, _ := http.NewRequest(http.MethodGet, e.URL+"/login", nil)
			for k, v := range proxied {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			pre := setCookie(resp, web.PreSessionCookie)
			if pre == nil || pre.Secure != c.secure {
				t.Fatalf("pre-session cookie %v, want Secure=%v", pre, c.secure)
			}
			tok := regexp.MustCompile(`name="_csrf" value="([^"]+)"`).FindSubmatch(body)
			if tok == nil {
				t.Fatal("no CSRF token on the login page")
			}
			b := newBrowser(t, e.URL)
			u, _ := url.Parse(e.URL)
			b.c.Jar.SetCookies(u, []*http.Cookie{{Name: pre.Name, Value: pre.Value, Path: "/"}})
			// RealIP: a failed login is audited with the client's address.
			resp, _ = b.postWith("/login", url.Values{"username": {"olga"}, "password": {"wrong-password"}, "_csrf": {string(tok[1])}}, proxied)
			if resp.StatusCode != 401 {
				t.Fatalf("a wrong password: %d", resp.StatusCode)
			}
			resp, _ = b.postWith("/login", url.Values{"username": {"olga"}, "password": {"password-of-olga"}, "_csrf": {string(tok[1])}}, proxied)
			if resp.StatusCode != 303 {
				t.Fatalf("login: %d", resp.StatusCode)
			}
			if s := setCookie(resp, web.SessionCookie); s == nil || s.Secure != c.secure {
				t.Fatalf("session cookie %v, want Secure=%v", s, c.secure)
			}

			var audit struct {
				Items []struct{ Action, Detail string }
			}
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=100", Token: e.Admin}, 200, &audit)
			var got []string
			for _, a := range audit.Items {
				if a.Action == "login-failed" {
					got = append(got, a.Detail)
				}
			}
			if len(got) != 1 || got[0] != c.auditIP {
				t.Fatalf("failed logins audited from %q, want [%s]", got, c.auditIP)
			}
		})
	}
}

// TestSecurityHeaders_OnPagesFragmentsAndAPI: every answer carries the
// hardening headers: a page, a fragment, a refusal, an API answer.
func TestSecurityHeaders_OnPagesFragmentsAndAPI(t *testing.T) {
	e, op, _ := fixture(t)
	want := map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
	}
	check := func(what string, resp *http.Response) {
		t.Helper()
		for k, v := range want {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s (%d): %s = %q, want %q", what, resp.StatusCode, k, got, v)
			}
		}
	}
	for _, p := range []string{"/", "/ui/machines", "/machines/m1", "/favicon.ico"} {
		resp, err := op.c.Get(e.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		check("GET "+p, resp)
	}
	resp, _ := op.postWith("/machines/m1/push", url.Values{}, nil)
	check("a refused POST", resp)
	for _, r := range []ctltest.Request{
		{Method: "GET", Path: "/api/v1/machines", Token: e.Admin},
		{Method: "GET", Path: "/api/v1/machines"},
	} {
		resp, _ := e.Do(r)
		check("API "+r.Method+" "+r.Path, resp)
	}
}

// TestFavicon_Served: the layout links an icon that is served, and
// /favicon.ico answers too, so no page logs a 404.
func TestFavicon_Served(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	b := newBrowser(t, e.URL)
	_, page := b.get("/login")
	m := regexp.MustCompile(`<link rel="icon" type="image/svg\+xml" href="(/static/favicon\.[0-9a-f]{12}\.svg)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no icon linked from the layout")
	}
	for _, p := range []string{m[1], "/favicon.ico"} {
		resp, err := http.Get(e.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/svg+xml" {
			t.Errorf("%s: %d %s", p, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

func TestParseTrustedProxies(t *testing.T) {
	got, err := web.ParseTrustedProxies(" 10.0.0.0/8, 192.168.1.7 ,::1,")
	if err != nil || len(got) != 3 || got[0].String() != "10.0.0.0/8" || got[1].String() != "192.168.1.7/32" || got[2].String() != "::1/128" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := web.ParseTrustedProxies("10.0.0.0/33"); err == nil {
		t.Fatal("a bad prefix was taken")
	}
	if got, err := web.ParseTrustedProxies(""); err != nil || got != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
}

// TestForms_TextTheAPIRefusesIsRefusedHereToo: the API refuses a body that
// is not UTF-8, or holds a NUL, on every store; the dashboard's variables
// form took the same bytes straight to the store, where SQLite kept them
// (and the API then showed, and the declaration carried, U+FFFD) and
// PostgreSQL refused them with no field named.
func TestForms_TextTheAPIRefusesIsRefusedHereToo(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d)
			e.AddUser("olga", "operator")
			e.Enroll("m1")
			op := newBrowser(t, e.URL)
			op.login("olga", "password-of-olga")
			op.get("/machines/m1")
			for value, want := range map[string]string{"GREETING=caf\xe9": "not valid UTF-8", "GREETING=caf\x00e": "NUL"} {
				st, body := op.post("/machines/m1/variables", url.Values{"generation": {"1"}, "vars": {value}}, true)
				var vs struct {
					Variables map[string]string `json:"variables"`
				}
				e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/variables", Token: e.Admin}, 200, &vs)
				if st != 400 || !strings.Contains(body, want) || len(vs.Variables) != 0 {
					t.Errorf("dashboard variable %q: %d %.300q; variables now %q, want 400 saying %s and nothing stored",
						value, st, body, vs.Variables, want)
				}
			}
		})
	}
}

// TestDashboard_AnAPITokenIsNoSession: the dashboard took a person's API
// token set as its session cookie (auth.ParsePerson takes both): a push
// made with it was audited as the owner's login, "user:olga", where the
// API names the token, and logging it out revoked it as a session while
// the token list went on saying it was active. It is refused as a session.
func TestDashboard_AnAPITokenIsNoSession(t *testing.T) {
	e, _, _ := fixture(t)
	olga := e.Login("olga", "password-of-olga")
	var tok struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: olga,
		Body: map[string]any{"name": "ci", "role": "operator", "expires_in": "24h"}}, 201, &tok)
	b := newBrowser(t, e.URL)
	u, _ := url.Parse(e.URL)
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: web.SessionCookie, Value: tok.Token, Path: "/"}})
	if st, body := b.get("/machines/m1"); st == 200 && !strings.Contains(body, "Log in") {
		t.Fatalf("the machine's page with an API token as the session: %d", st)
	}
	b.post("/machines/m1/push", url.Values{"generation": {"1"}}, true)
	// The login page gives a CSRF token for whatever cookie it is sent.
	if st, _ := b.get("/login"); st != 200 || b.csrf == "" {
		t.Fatalf("the login page with an API token as the cookie: %d (csrf %q)", st, b.csrf)
	}
	b.post("/logout", url.Values{}, true)
	var page struct {
		Items []struct{ Actor, Action string }
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=machine/m1", Token: e.Admin}, 200, &page)
	for _, ev := range page.Items {
		if ev.Action == "push" {
			t.Fatalf("a push made with the API token as the dashboard's session, audited as %q", ev.Actor)
		}
	}
	if resp, body := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: tok.Token}); resp.StatusCode != 200 {
		t.Fatalf("the API token after a dashboard logout: %d %s", resp.StatusCode, body)
	}
}
