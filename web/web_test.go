package web_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/testwait"
	"mesh/web"
)

// browser is a person's HTTP client: cookies kept, redirects not followed.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfRE = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

func (b *browser) get(path string) (int, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if m := csrfRE.FindSubmatch(body); m != nil {
		b.csrf = string(m[1])
	}
	if resp.StatusCode == http.StatusSeeOther {
		return resp.StatusCode, resp.Header.Get("Location")
	}
	return resp.StatusCode, string(body)
}

func (b *browser) post(path string, form url.Values, withCSRF bool) (int, string) {
	b.t.Helper()
	if withCSRF {
		form.Set("_csrf", b.csrf)
	}
	resp, err := b.c.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusSeeOther {
		return resp.StatusCode, resp.Header.Get("Location")
	}
	return resp.StatusCode, string(body)
}

func (b *browser) login(user, pw string) {
	b.t.Helper()
	b.get("/login")
	if st, loc := b.post("/login", url.Values{"username": {user}, "password": {pw}}, true); st != 303 || loc != "/" {
		b.t.Fatalf("login: %d %s", st, loc)
	}
}

// fixture: a controller with an admin and a viewer browser, a module with
// a build, and an enrolled machine.
func fixture(t *testing.T) (*ctltest.Env, *browser, *browser) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("olga", "operator")
	e.AddUser("vera", "viewer")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "node-tools"}}, 201, nil)
	if resp, b := e.Upload(e.Admin, "node-tools", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": "x\n"}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %s", b)
	}
	e.Enroll("m1")
	op := newBrowser(t, e.URL)
	op.login("olga", "password-of-olga")
	vw := newBrowser(t, e.URL)
	vw.login("vera", "password-of-vera")
	return e, op, vw
}

func TestPages_RenderForEveryRole(t *testing.T) {
	_, op, vw := fixture(t)
	for _, p := range []struct{ path, want string }{
		{"/", `data-machine="m1"`}, {"/ui/machines", "behind by 1 generation(s)"}, {"/machines/m1", "Assignments"},
		{"/ui/machines/m1/status", "Sends"}, {"/modules", "node-tools"}, {"/releases", "Fleet default"}, {"/plans", "No plans yet"}, {"/instances", "serving"}, {"/audit", "enroll"},
		{"/?state=behind&q=m", "m1"},
	} {
		for _, b := range []*browser{op, vw} {
			if st, body := b.get(p.path); st != 200 || !strings.Contains(body, p.want) {
				t.Errorf("GET %s: %d, want 200 with %q:\n%.300s", p.path, st, p.want, body)
			}
		}
	}
	if st, body := vw.get("/machines/m1"); st != 200 || strings.Contains(body, "Save assignments") || strings.Contains(body, "Push") {
		t.Errorf("a viewer is offered a change: %d", st)
	}
	if st, body := op.get("/machines/m1"); st != 200 || !strings.Contains(body, "Save assignments") {
		t.Errorf("an operator is not offered the form: %d", st)
	}
}

func TestPages_NeedALogin(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	anon := newBrowser(t, e.URL)
	for _, p := range []string{"/", "/machines/m1", "/modules", "/audit"} {
		if st, loc := anon.get(p); st != 303 || loc != "/login" {
			t.Errorf("GET %s anonymously: %d %s", p, st, loc)
		}
	}
	anon.get("/login")
	if st, _ := anon.post("/login", url.Values{"username": {"admin"}, "password": {"wrong-password"}}, true); st != 401 {
		t.Errorf("a wrong password: %d", st)
	}
	if st, _ := anon.post("/machines/m1/push", url.Values{"generation": {"1"}}, true); st != 401 {
		t.Errorf("an anonymous change: %d", st)
	}
}

func TestChanges_RoleAndCSRFChecked(t *testing.T) {
	e, op, vw := fixture(t)
	form := url.Values{"generation": {"1"}, "m_node-tools": {"on"}}
	vw.get("/machines/m1")
	if st, body := vw.post("/machines/m1/assignments", form, true); st != 403 || !strings.Contains(body, "cannot do this") {
		t.Errorf("a viewer's change: %d", st)
	}
	op.get("/machines/m1")
	if st, body := op.post("/machines/m1/assignments", form, false); st != 403 || !strings.Contains(body, "CSRF") {
		t.Errorf("a change without the CSRF token: %d", st)
	}
	if st, _ := op.post("/machines/m1/assignments", url.Values{"generation": {"1"}, "m_node-tools": {"on"}, "_csrf": {"forged"}}, false); st != 403 {
		t.Errorf("a change with a forged CSRF token: %d", st)
	}
	var as struct{ Assignments []any }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
	if len(as.Assignments) != 0 {
		t.Fatal("a refused change was stored")
	}
	if st, loc := op.post("/machines/m1/assignments", form, true); st != 303 || loc != "/machines/m1" {
		t.Fatalf("the operator's change: %d %s", st, loc)
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
	if len(as.Assignments) != 1 {
		t.Fatal("the operator's change was not stored")
	}
	// The page it lands on says so, once.
	if _, body := op.get("/machines/m1"); !strings.Contains(body, "Assignments saved as generation 2") {
		t.Errorf("the page after the save does not say it was saved:\n%.300s", body)
	}
	if _, body := op.get("/machines/m1"); strings.Contains(body, "Assignments saved") {
		t.Error("the saved notice is shown again on the next visit")
	}
}

// TestSaved_NotFromALink: the "saved" notice is only what this server
// saved; words in a link are not shown as one.
func TestSaved_NotFromALink(t *testing.T) {
	e, op, _ := fixture(t)
	const lie = "Host m1 applied generation 9 and all checks pass"
	for _, path := range []string{"/machines/m1?saved=" + url.QueryEscape(lie)} {
		if st, body := op.get(path); st != 200 || strings.Contains(body, lie) {
			t.Errorf("GET %s: %d, the page shows the link's words", path, st)
		}
	}
	id := haltedPlan(t, e)
	path := fmt.Sprintf("/plans/%d", id)
	if st, body := op.get(path + "?saved=" + url.QueryEscape(lie)); st != 200 || strings.Contains(body, lie) {
		t.Errorf("GET %s: %d, the page shows the link's words", path, st)
	}
}

// TestStaleEdit_ConflictLosesNothing: a form made from generation 1 is
// saved after the machine moved on: a plain conflict message, the person's
// input kept, nothing overwritten.
func TestStaleEdit_ConflictLosesNothing(t *testing.T) {
	e, op, _ := fixture(t)
	op.get("/machines/m1")
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"port": "9000"}}}, 200, nil)
	st, body := op.post("/machines/m1/assignments", url.Values{"generation": {"1"}, "m_node-tools": {"on"}, "b_node-tools": {"1"}, "r_node-tools": {"typed by hand"}}, true)
	if st != 409 || !strings.Contains(body, "Not saved: m1 changed since you opened this page (generation 1 then, 2 now: variables") {
		t.Fatalf("stale save: %d\n%s", st, body)
	}
	if !strings.Contains(body, `value="typed by hand"`) || !strings.Contains(body, `name="generation" value="2"`) {
		t.Fatal("the person's input was lost, or the form was not brought up to date")
	}
	var as struct{ Assignments []any }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
	if len(as.Assignments) != 0 {
		t.Fatal("the stale save overwrote the store")
	}
	// A stale save of variables lists the variables stored now (it
	// listed the assignments).
	st, body = op.post("/machines/m1/variables", url.Values{"generation": {"1"}, "variables": {"port=7000"}}, true)
	if st != 409 || !strings.Contains(body, "the variables stored now are: port=9000.") {
		t.Fatalf("stale save of variables: %d\n%s", st, body)
	}
}

func TestStatic_HashedAndCached(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	b := newBrowser(t, e.URL)
	_, page := b.get("/login")
	m := regexp.MustCompile(`src="(/static/htmx\.min\.[0-9a-f]{12}\.js)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no hashed htmx URL in the page")
	}
	resp, err := http.Get(e.URL + m[1])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") {
		t.Fatalf("%s: %d %s", m[1], resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
}

// TestOverview_SaysWhyBehind: a machine behind says why, at a glance: not
// sent yet (and when its host last polled, or that it never did), sent and awaiting the host's
// report, or its generation cannot be composed (and why).
func TestOverview_SaysWhyBehind(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d)
			e.AddUser("olga", "operator")
			op := newBrowser(t, e.URL)
			op.login("olga", "password-of-olga")
			rowOf := func(name string) string {
				t.Helper()
				_, body := op.get("/ui/machines?q=" + name)
				i := strings.Index(body, `data-machine="`+name+`"`)
				if i < 0 {
					t.Fatalf("no row for %s:\n%.500s", name, body)
				}
				return body[i:]
			}
			poll := func(token string) int {
				resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=0s", Token: token,
					Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}})
				return resp.StatusCode
			}

			a := e.Enroll("m-a")
			if r := rowOf("m-a"); !strings.Contains(r, "behind by 1 generation(s)") || !strings.Contains(r, "not sent yet: enrolled 0s ago, never polled") {
				t.Fatalf("enrolled, never polled:\n%.400s", r)
			}
			if st := poll(a.Token); st != 200 {
				t.Fatalf("poll: %d", st)
			}
			if r := rowOf("m-a"); !strings.Contains(r, "sent 0s ago by "+e.Ctl.Instance+", no report yet") {
				t.Fatalf("sent, not reported:\n%.400s", r)
			}

			// A module that needs a variable the machine does not have.
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "needs-port"}}, 201, nil)
			if resp, b := e.Upload(e.Admin, "needs-port", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/p.conf", "content": "port=${var.port}\n"}]}`, nil, ""); resp.StatusCode != 201 {
				t.Fatalf("upload: %s", b)
			}
			b := e.Enroll("m-b")
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m-b/assignments", Token: e.Admin,
				Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "needs-port"}}}}, 200, nil)
			// Recorded when the change is composed, before the host asks.
			testwait.Until(10*time.Second, func() bool { return strings.Contains(rowOf("m-b"), "cannot be composed") })
			if r := rowOf("m-b"); !strings.Contains(r, "behind: generation 2 cannot be composed: ") || !strings.Contains(r, "port") ||
				!strings.Contains(r, "nothing is sent until that is fixed") {
				t.Fatalf("cannot compose:\n%.600s", r)
			}
			if st := poll(b.Token); st != 304 {
				t.Fatalf("a poll of a generation that cannot be composed: %d, want 304", st)
			}
			// The API says it too.
			var mb, ma struct {
				ComposeError string `json:"compose_error"`
			}
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m-b", Token: e.Admin}, 200, &mb)
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m-a", Token: e.Admin}, 200, &ma)
			if !strings.Contains(mb.ComposeError, "port") || ma.ComposeError != "" {
				t.Fatalf("compose_error: m-b %q, m-a %q", mb.ComposeError, ma.ComposeError)
			}
		})
	}
}

// TestVariables_SameRefusalBothWays: the dashboard's form and the API
// refuse the same oversized variable with the same words, and store
// nothing (the form used to save it: it skipped the API's cap).
func TestVariables_SameRefusalBothWays(t *testing.T) {
	e, op, _ := fixture(t)
	big := strings.Repeat("x", 4097)
	const words = "variables.big: at most 4096 bytes"
	resp, body := e.Do(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"big": big}}})
	if resp.StatusCode != 400 || !strings.Contains(string(body), words) {
		t.Fatalf("API: %d %s", resp.StatusCode, body)
	}
	op.get("/machines/m1")
	st, page := op.post("/machines/m1/variables", url.Values{"generation": {"1"}, "vars": {"big=" + big}}, true)
	if st != 400 || !strings.Contains(page, words) {
		t.Fatalf("form: %d, want 400 saying %q:\n%.400s", st, words, page)
	}
	var vs struct{ Variables map[string]string }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/variables", Token: e.Admin}, 200, &vs)
	if len(vs.Variables) != 0 {
		t.Fatalf("a refused variable was stored: %d key(s)", len(vs.Variables))
	}
}

// TestLogout_RevokesTheSession: a logged-out session's token used to work
// 12 hours more, as a cookie and as an API bearer. Now it is refused at
// once, both ways.
func TestLogout_RevokesTheSession(t *testing.T) {
	e, op, _ := fixture(t)
	u, _ := url.Parse(e.URL)
	var token string
	for _, ck := range op.c.Jar.Cookies(u) {
		if ck.Name == web.SessionCookie {
			token = ck.Value
		}
	}
	if token == "" {
		t.Fatal("no session cookie after login")
	}
	if resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: token}); resp.StatusCode != 200 {
		t.Fatalf("the session token as a bearer before logout: %d", resp.StatusCode)
	}
	op.get("/")
	if st, loc := op.post("/logout", url.Values{}, true); st != 303 || loc != "/login" {
		t.Fatalf("logout: %d %s", st, loc)
	}
	resp, body := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: token})
	if resp.StatusCode != 401 || !strings.Contains(string(body), "revoked") {
		t.Fatalf("the session token after logout: %d %s", resp.StatusCode, body)
	}
	again := newBrowser(t, e.URL)
	again.c.Jar.SetCookies(u, []*http.Cookie{{Name: web.SessionCookie, Value: token, Path: "/"}})
	if st, loc := again.get("/"); st != 303 || loc != "/login" {
		t.Fatalf("the old cookie after logout: %d %s", st, loc)
	}
}

// TestLogin_ThrottledSaysSo: a person whose logins are throttled is told
// so and when to try again (the page said "internal error").
func TestLogin_ThrottledSaysSo(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	anon := newBrowser(t, e.URL)
	anon.get("/login")
	for range 40 {
		st, body := anon.post("/login", url.Values{"username": {"admin"}, "password": {"wrong-password"}}, true)
		if st == http.StatusTooManyRequests {
			if !strings.Contains(body, "too many failed logins; try again in") || strings.Contains(body, "internal error") {
				t.Fatalf("a throttled login's page: %.2000s", body)
			}
			return
		}
	}
	t.Fatal("40 wrong passwords were never throttled")
}

// TestModules_GoingBackAsksWhy: the modules page offers a build older than
// the current one as going back, with the reason it needs, and says why
// the module went back; a yanked build is marked, not offered (its button
// led to "build 3 is yanked").
func TestModules_GoingBackAsksWhy(t *testing.T) {
	e, op, _ := fixture(t)
	for range 2 {
		if resp, b := e.Upload(e.Admin, "node-tools", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": "y\n"}]}`, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %s", b)
		}
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/node-tools/current", Token: e.Admin, Body: map[string]any{"build": 2, "reason": "3 breaks"}}, 200, nil)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/node-tools/builds/3/yank", Token: e.Admin, Body: map[string]any{"reason": "check broken"}}, 200, nil)
	st, body := op.get("/modules")
	if st != 200 || !strings.Contains(body, "Gone back to build 2: 3 breaks.") || !strings.Contains(body, `name="reason" required`) || !strings.Contains(body, "Go back to build 1") ||
		strings.Contains(body, "Make build 3 current") || !regexp.MustCompile(`yanked \d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^<]* by [^<]+: check broken`).MatchString(body) {
		t.Fatalf("modules page: %d\n%s", st, body)
	}
	if st, body := op.post("/modules/node-tools/current", url.Values{"build": {"1"}}, true); st != 400 || !strings.Contains(body, "needs a reason") {
		t.Fatalf("going back without a reason: %d %.300s", st, body)
	}
	if st, loc := op.post("/modules/node-tools/current", url.Values{"build": {"1"}, "reason": {"build 2 leaks"}}, true); st != 303 || loc != "/modules" {
		t.Fatalf("going back with a reason: %d %s", st, loc)
	}
	if _, body := op.get("/modules"); !strings.Contains(body, "Gone back to build 1: build 2 leaks.") {
		t.Fatalf("the page does not say why the module went back:\n%s", body)
	}
}
