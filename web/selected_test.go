package web_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMachinePage_SaysWhatSelectorsGive: a module a selector gives the
// machine is said so on its page, to viewers and on operators' form alike
// (it read as not given at all: unchecked, or absent).
func TestMachinePage_SaysWhatSelectorsGive(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("vera", "viewer")
	e.AddUser("olga", "operator")
	e.Enroll("m1")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
	etag := func(path string) string {
		return e.JSON(ctltest.Request{Method: "GET", Path: path, Token: e.Admin}, 200, nil).Header.Get("ETag")
	}
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/labels", Token: e.Admin,
		Header: map[string]string{"If-Match": etag("/api/v1/machines/m1")}, Body: map[string]any{"labels": map[string]string{"role": "web"}}}, 200, nil)
	e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/web", Token: e.Admin,
		Header: map[string]string{"If-Match": etag("/api/v1/modules/web")}, Body: map[string]any{"selector": "role=web"}}, 200, nil)
	for _, who := range []string{"vera", "olga"} {
		b := newBrowser(t, e.URL)
		b.login(who, "password-of-"+who)
		if st, body := b.get("/machines/m1"); st != 200 || !strings.Contains(body, "given by a selector") {
			t.Fatalf("%s: m1's page: %d, web given by a selector not said:\n%.2000s", who, st, body)
		}
	}
}
