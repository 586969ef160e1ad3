package web_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestModules_ARefusedGoingBackKeepsTheReason: going back to an older
// build, refused (it was yanked while the person typed), answered with an
// error page of its own: the reason typed was lost, and its only link led
// to the machines.
func TestModules_ARefusedGoingBackKeepsTheReason(t *testing.T) {
	e, op, _ := fixture(t)
	for range 2 {
		if resp, b := e.Upload(e.Admin, "node-tools", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": "y\n"}]}`, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %s", b)
		}
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/node-tools/current", Token: e.Admin, Body: map[string]any{"build": 3}}, 200, nil)
	op.get("/modules")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/node-tools/builds/2/yank", Token: e.Admin, Body: map[string]any{"reason": "bad"}}, 200, nil)
	const why = "build 3 breaks the login banner"
	st, body := op.post("/modules/node-tools/current", url.Values{"build": {"2"}, "reason": {why}}, true)
	if st != 400 || !strings.Contains(body, `id="notice"`) || !strings.Contains(body, "build 2 is yanked") ||
		!strings.Contains(body, "The reason you typed is kept: &#34;"+why+"&#34;.") || !strings.Contains(body, "<h1>Modules</h1>") {
		t.Fatalf("a refused going back: %d\n%.2000s", st, body)
	}
	// Refused for want of a reason, the form of the build keeps it empty
	// and the page is the Modules page.
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/node-tools/builds/3/yank", Token: e.Admin, Body: map[string]any{"reason": "x"}}, 409, nil)
	st, body = op.post("/modules/node-tools/current", url.Values{"build": {"1"}, "reason": {" "}}, true)
	if st != 400 || !strings.Contains(body, "needs a reason") || !regexp.MustCompile(`name="reason"[^>]*value=" "`).MatchString(body) {
		t.Fatalf("going back without a reason: %d\n%.2000s", st, body)
	}
}

// TestSession_EndedMidFormSaysSoAndKeepsWhatWasTyped: the session ended
// (logged out in another tab) while a person typed variables: the form's
// post was answered "This form has expired … (CSRF check failed). Reload
// the page", and what was typed was gone.
func TestSession_EndedMidFormSaysSoAndKeepsWhatWasTyped(t *testing.T) {
	_, op, _ := fixture(t)
	op.get("/machines/m1")
	form := url.Values{"generation": {"1"}, "vars": {"PORT=8443"}, "_csrf": {op.csrf}}
	if st, loc := op.post("/logout", url.Values{}, true); st != 303 || loc != "/login" {
		t.Fatalf("logout: %d %s", st, loc)
	}
	st, body := op.post("/machines/m1/variables", form, false)
	if st != 403 || !strings.Contains(body, "Your session has ended") || !strings.Contains(body, "vars: PORT=8443") || strings.Contains(body, "CSRF check failed") {
		t.Fatalf("a form of a session that ended: %d\n%.2000s", st, body)
	}
	// A login form gone stale is no session's: its password is never
	// shown back.
	if st, body := op.post("/login", url.Values{"username": {"olga"}, "password": {"hunter2-secret"}, "_csrf": {"stale"}}, false); st != 403 ||
		strings.Contains(body, "hunter2-secret") {
		t.Fatalf("a stale login form: %d %.500s", st, body)
	}
	// A form with no token at all is still refused as before.
	if st, body := op.post("/machines/m1/variables", url.Values{"vars": {"x=1"}}, false); st != 403 || !strings.Contains(body, "CSRF check failed") {
		t.Fatalf("a form without a token: %d %.300s", st, body)
	}
}

// TestSession_EndedPageIsForThisDashboardsFormsOnly: the session-ended
// page printed back the fields of any POST with a made-up token and no
// cookie of this dashboard: an outsider's sentence on the dashboard's own
// origin. The fields of a module named like a credential ("keycloak") were
// dropped from what was shown to copy. A session revoked while its cookie
// stayed (a role change), or a form of a session logged out and then in
// again elsewhere, lost what was typed.
func TestSession_EndedPageIsForThisDashboardsFormsOnly(t *testing.T) {
	e, op, _ := fixture(t)
	jar, _ := cookiejar.New(nil)
	out := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	const bait = "Security notice: your account is locked. Call the help desk"
	resp, err := out.PostForm(e.URL+"/machines/m1/variables", url.Values{"_csrf": {"anything"}, "notice": {bait}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), bait) || resp.StatusCode != 403 {
		t.Fatalf("an outsider's POST: %d\n%.1000s", resp.StatusCode, b)
	}

	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "keycloak"}}, 201, nil)
	op.get("/machines/m1")
	form := url.Values{"generation": {"1"}, "m_keycloak": {"on"}, "r_keycloak": {"the SSO realm"}, "_csrf": {op.csrf}}
	if st, loc := op.post("/logout", url.Values{}, true); st != 303 || loc != "/login" {
		t.Fatalf("logout: %d %s", st, loc)
	}
	if st, body := op.post("/machines/m1/assignments", form, false); st != 403 || !strings.Contains(body, "r_keycloak: the SSO realm") {
		t.Fatalf("a form of a session that ended, for module keycloak: %d\n%.2000s", st, body)
	}
	// Logged in again elsewhere, the old tab's form.
	op.login("olga", "password-of-olga")
	if st, body := op.post("/machines/m1/assignments", form, false); st != 403 || !strings.Contains(body, "r_keycloak: the SSO realm") {
		t.Fatalf("the old form after a new login: %d\n%.2000s", st, body)
	}
	// Revoked while the cookie stays: a role change.
	op.get("/machines/m1")
	e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/users/olga", Token: e.Admin, Body: map[string]any{"role": "admin"}}, 200, nil)
	if st, body := op.post("/machines/m1/variables", url.Values{"generation": {"1"}, "vars": {"PORT=8443"}}, true); st != 401 ||
		!strings.Contains(body, "Your session has ended") || !strings.Contains(body, "vars: PORT=8443") {
		t.Fatalf("a form of a session revoked meanwhile: %d\n%.2000s", st, body)
	}
}
