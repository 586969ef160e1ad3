package web_test

import (
	"context"
	"fmt"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
)

// whenRE is a time as the dashboard says one: "12s ago" or a stamp.
var whenRE = regexp.MustCompile(`\d+[smhd] ago|\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ`)

// TestReleases_RolloutWordsSayWhen: /releases showed a release's rollout
// ("Rollout: running") and each of its machines' state ("upgrading",
// "rolled back") with no time at all: not when the rollout began or
// ended, nor when a machine began its trial or was found to have rolled
// back. The machine's own page says "upgrading since …" and "rolled back
// …"; the releases page, where an operator looks across the fleet, gave
// the word alone, so a trial begun a second ago and one stuck for an hour
// read the same.
func TestReleases_RolloutWordsSayWhen(t *testing.T) {
	e, _, vw := fixture(t)
	e.Enroll("m2")
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %s", b)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/1.5.0/rollout", Token: e.Admin, Body: map[string]any{"canary": 1}}, 201, nil)

	rowOf := regexp.MustCompile(`(?s)<tr><td data-label="Machine">m1</td>(.*?)</tr>`)
	_, body := vw.get("/releases")
	row := rowOf.FindStringSubmatch(body)
	if row == nil || !strings.Contains(row[1], "upgrading") {
		t.Fatalf("/releases shows no upgrading row of m1:\n%.3000s", body)
	}
	if !whenRE.MatchString(row[1]) {
		t.Errorf("/releases says of m1 %q: upgrading, since no time", html.UnescapeString(stripTags(row[1])))
	}
	h3 := regexp.MustCompile(`(?s)<h3>Rollout:(.*?)</h3>`).FindStringSubmatch(body)
	if h3 == nil {
		t.Fatalf("/releases shows no rollout:\n%.3000s", body)
	}
	if !whenRE.MatchString(h3[1]) {
		t.Errorf("/releases says of the rollout %q: no time it began", html.UnescapeString(stripTags(h3[1])))
	}

	// m1's trial rolled back an hour after it began.
	start := time.Now().UTC().Add(-2 * time.Hour)
	if err := e.Ctl.Store.DB().Exec("UPDATE rollout_machines SET state = 'rolled_back', reason = 'it exited before completing a reconcile (exit status 3)', started_at = ?, finished_at = ? WHERE state = 'upgrading'",
		start, start.Add(time.Hour)).Error; err != nil {
		t.Fatal(err)
	}
	_, body = vw.get("/releases")
	row = rowOf.FindStringSubmatch(body)
	if row == nil || !strings.Contains(row[1], "rolled_back") {
		t.Fatalf("/releases shows no rolled back row of m1:\n%.3000s", body)
	}
	if !strings.Contains(row[1], "1h ago") && !strings.Contains(row[1], start.Add(time.Hour).Format("2006-01-02 15:04:05Z")) {
		t.Errorf("/releases says of m1 %q: not when it rolled back", html.UnescapeString(stripTags(row[1])))
	}
}

// TestRolloutPage_EndedMachineSaysWhenItEnded: the rollout page gave each
// machine's state and the time its trial began ("Started"); a machine
// whose trial ended (rolled back, upgraded) said the word with only the
// start, never when the end was found, so "rolled back" next to a time
// two hours old reads as if it rolled back then.
func TestRolloutPage_EndedMachineSaysWhenItEnded(t *testing.T) {
	e, _, vw := fixture(t)
	e.Enroll("m2")
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %s", b)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/1.5.0/rollout", Token: e.Admin, Body: map[string]any{"canary": 1}}, 201, nil)
	start := time.Now().UTC().Add(-2 * time.Hour)
	end := start.Add(time.Hour)
	if err := e.Ctl.Store.DB().Exec("UPDATE rollout_machines SET state = 'rolled_back', reason = 'it exited before completing a reconcile (exit status 3)', started_at = ?, finished_at = ? WHERE state = 'upgrading'",
		start, end).Error; err != nil {
		t.Fatal(err)
	}
	_, body := vw.get("/releases/1.5.0/rollout")
	row := regexp.MustCompile(`(?s)<tr data-machine="m1">(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil || !strings.Contains(row[1], "rolled back") {
		t.Fatalf("the rollout page shows no rolled back row of m1:\n%.3000s", body)
	}
	if !strings.Contains(row[1], end.Format("2006-01-02 15:04:05Z")) && !strings.Contains(row[1], "1h ago") {
		t.Errorf("the rollout page says of m1 %q: not when it rolled back (%s)", html.UnescapeString(stripTags(row[1])), end.Format(time.RFC3339))
	}
}

func stripTags(s string) string {
	return strings.Join(strings.Fields(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(s, " ")), " ")
}

// TestPlanPage_StepWordsSayWhen: a plan's page gave each machine's step
// ("sent") with its generation and why, never when: the step was reached
// at a time the store keeps (started_at) and the page left off, so a
// step sent a second ago and one sent and unanswered for nine minutes of
// a ten-minute tier deadline read alike.
func TestPlanPage_StepWordsSayWhen(t *testing.T) {
	e, _, vw := fixture(t)
	ctx := context.Background()
	m, _ := e.Ctl.Store.Machine(ctx, "m1")
	g := m.Generation
	if _, err := e.Ctl.Store.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{{Module: "node-tools"}}); err != nil {
		t.Fatal(err)
	}
	report(t, e, "m1", 1)
	if resp, b := e.Upload(e.Admin, "node-tools", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": "y\n"}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %s", b)
	}
	ps, err := e.Ctl.Store.Plans(ctx, 1, 0)
	if err != nil || len(ps) != 1 {
		t.Fatalf("build 2 made no plan: %v %v", ps, err)
	}
	_, body := vw.get(fmt.Sprintf("/plans/%d", ps[0].ID))
	row := regexp.MustCompile(`(?s)<tr data-machine="m1">(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil || !strings.Contains(row[1], "sent") {
		t.Fatalf("plan %d shows no sent step of m1:\n%.3000s", ps[0].ID, body)
	}
	if !regexp.MustCompile(`\d\d:\d\d:\d\d|\d+[smhd] ago`).MatchString(row[1]) {
		t.Errorf("plan %d says of m1's step %q: no time it was sent", ps[0].ID, html.UnescapeString(stripTags(row[1])))
	}
}
