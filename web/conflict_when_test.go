package web_test

import (
	"context"
	"html"
	"regexp"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestConflict_SaysWhenItWasChecked: every state word the dashboard shows
// says when what it claims was checked. A machine in conflict (its host
// finished a generation the store never made) said only "nothing is sent
// until an admin resolves it": not when the conflict was found, nor when
// its host was last heard from, so an admin could not tell a conflict its
// host repeats every minute from one said once, a day ago, by a host gone
// since.
func TestConflict_SaysWhenItWasChecked(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("vera", "viewer")
	vw := newBrowser(t, e.URL)
	vw.login("vera", "password-of-vera")
	en := e.Enroll("m1")
	// The host says it finished generation 99: the store holds 1.
	e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=1s", Token: en.Token,
		Header: map[string]string{"X-Mesh-Host-Version": "1.6.0", "X-Mesh-Schema": "1", "If-None-Match": `"99"`}})
	if m, _ := e.Ctl.Store.Machine(context.Background(), "m1"); m == nil || !m.Conflict {
		t.Fatalf("m1 is not in conflict: %+v", m)
	}
	when := regexp.MustCompile(`\d+[smhd] ago|\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ`)
	_, page := vw.get("/machines/m1")
	since := regexp.MustCompile(`<span class="since">([^<]*)</span>`).FindStringSubmatch(page)
	if since == nil || !strings.Contains(page, "conflict: ") {
		t.Fatalf("/machines/m1 shows no conflict status:\n%.1500s", page)
	}
	if !when.MatchString(since[1]) {
		t.Errorf("/machines/m1 says %q of its conflict: not when it was found or last said by its host", html.UnescapeString(since[1]))
	}
	_, frag := vw.get("/ui/machines")
	cell := regexp.MustCompile(`(?s)<tr data-machine="m1">.*?data-label="Since when, and why">([^<]*)</td>`).FindStringSubmatch(frag)
	if cell == nil {
		t.Fatalf("no row of m1 in the overview:\n%.1500s", frag)
	}
	if !when.MatchString(cell[1]) {
		t.Errorf("the overview says %q of m1's conflict: not when it was checked", html.UnescapeString(cell[1]))
	}
}
