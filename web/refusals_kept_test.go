package web_test

import (
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
