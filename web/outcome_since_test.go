package web_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestOverview_OutcomeSinceItsReport: the overview says a rejected
// (refused, failed, rolled back, current) machine is so since the report
// of that outcome. It said so from last_report_at, which every report
// moves: a checked report of the generation applied before, which says
// nothing of the rejection, became its "since when".
func TestOverview_OutcomeSinceItsReport(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("olga", "operator")
	op := newBrowser(t, e.URL)
	op.login("olga", "password-of-olga")
	en := e.Enroll("m1")
	poll := func() string {
		t.Helper()
		resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token,
			Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}})
		if resp.StatusCode != 200 {
			t.Fatalf("poll: %d %s", resp.StatusCode, b)
		}
		return resp.Header.Get("X-Mesh-Send")
	}
	report := func(body map[string]any) {
		t.Helper()
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: body}, 201, nil)
	}
	since := func() string {
		t.Helper()
		_, body := op.get("/ui/machines?q=m1")
		i := strings.Index(body, `data-machine="m1"`)
		if i < 0 {
			t.Fatalf("no row:\n%.500s", body)
		}
		row := body[i:min(len(body), i+1500)]
		if !strings.Contains(row, "rejected: failed 5 attempts") {
			t.Fatalf("not shown rejected:\n%s", row)
		}
		return regexp.MustCompile(`reported \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ`).FindString(row)
	}
	s1 := poll()
	report(map[string]any{"send": s1, "generation": 1, "outcome": "applied"})
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"port": "9000"}}}, 200, nil)
	s2 := poll()
	report(map[string]any{"send": s2, "generation": 2, "outcome": "rejected", "reason": "failed 5 attempts; last: port in use"})
	// The rejection an hour old (last_outcome_at exists from migration
	// 0026 on; before it, the error is the point).
	hourAgo := time.Now().Add(-time.Hour).UTC()
	db := e.Ctl.Store.DB()
	if err := db.Exec("UPDATE machines SET last_report_at = ? WHERE name = 'm1'", hourAgo).Error; err != nil {
		t.Fatal(err)
	}
	_ = db.Exec("UPDATE machines SET last_outcome_at = ? WHERE name = 'm1'", hourAgo).Error
	first := since()
	if want := "reported " + hourAgo.Format("2006-01-02 15:04:05Z"); first != want {
		t.Fatalf("the rejection's time %q, want %q", first, want)
	}
	// Between applies: a check of generation 1's services changed.
	report(map[string]any{"send": s1, "generation": 1, "outcome": "checked",
		"checks": []map[string]any{{"resource": "mod.svc", "ok": true, "at": time.Now().UTC(), "detail": "tcp"}}})
	later := since()
	t.Logf("rejected row: %q, then after a checked report of generation 1: %q", first, later)
	if first != later {
		t.Fatalf("the rejection's time moved from %q to %q: it is the last report's time, of any report", first, later)
	}
}
