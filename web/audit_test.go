package web_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestAuditPage_OfOneTarget: a machine's page links to its own audit log,
// which holds its events and no other machine's; each other target in the
// whole log links to its own; an event's text is escaped.
func TestAuditPage_OfOneTarget(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("vera", "viewer")
	e.Enroll("m1")
	e.Enroll("m2")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m2/revoke", Token: e.Admin,
		Body: map[string]any{"reason": "<b>disk sold</b>"}}, 200, nil)
	vw := newBrowser(t, e.URL)
	vw.login("vera", "password-of-vera")

	st, body := vw.get("/machines/m2")
	if st != 200 || !strings.Contains(body, `href="/audit?target=machine%2Fm2"`) {
		t.Fatalf("m2's page: %d, no link to its audit log:\n%s", st, body)
	}
	st, body = vw.get("/audit?target=machine%2Fm2")
	if st != 200 || !strings.Contains(body, "Audit log of machine/m2") || !strings.Contains(body, "revoke-machine") ||
		!strings.Contains(body, "&lt;b&gt;disk sold&lt;/b&gt;") || strings.Contains(body, "machine/m1") {
		t.Fatalf("m2's audit log: %d\n%s", st, body)
	}
	if _, body = vw.get("/audit"); !strings.Contains(body, `<a href="/audit?target=machine%2Fm1">machine/m1</a>`) {
		t.Fatalf("the whole log does not link m1's events to m1's log:\n%s", body)
	}
	if _, body = vw.get("/audit?target=machine%2Fnobody"); !strings.Contains(body, "No events of machine/nobody.") {
		t.Fatalf("a target without events:\n%s", body)
	}
	if st, _ = vw.get("/audit?target=" + strings.Repeat("x", 301)); st != 400 {
		t.Fatalf("a target of 301 characters: %d", st)
	}
}
