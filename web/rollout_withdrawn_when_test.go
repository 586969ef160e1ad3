package web_test

import (
	"html"
	"regexp"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestRolloutPage_AMachineNeverReachedByAnEndedRolloutIsNotSaidToCome: a
// rollout cancelled after its canary leaves the machines of its later
// waves unreached. The store shows each as "withdrawn — never reached: the
// rollout cancelled first"; the When column said of them "not reached
// yet", as if the rollout would still come to them. The same on /releases.
func TestRolloutPage_AMachineNeverReachedByAnEndedRolloutIsNotSaidToCome(t *testing.T) {
	e, _, vw := fixture(t)
	e.Enroll("m2")
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %s", b)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/1.5.0/rollout", Token: e.Admin, Body: map[string]any{"canary": 1}}, 201, nil)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/1.5.0/rollout/cancel", Token: e.Admin}, 200, nil)

	_, body := vw.get("/releases/1.5.0/rollout")
	row := regexp.MustCompile(`(?s)<tr data-machine="m2">(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil || !strings.Contains(row[1], "withdrawn") {
		t.Fatalf("the rollout page shows no withdrawn row of m2:\n%.3000s", body)
	}
	if strings.Contains(row[1], "not reached yet") {
		t.Errorf("the cancelled rollout's page says of m2 %q: 'not reached yet', though the rollout has ended and will never reach it",
			html.UnescapeString(stripTags(row[1])))
	}
	_, body = vw.get("/releases")
	row = regexp.MustCompile(`(?s)<tr><td data-label="Machine">m2</td>(.*?)</tr>`).FindStringSubmatch(body)
	if row != nil && strings.Contains(row[1], "not reached yet") {
		t.Errorf("/releases says of m2 %q: 'not reached yet', though the rollout was cancelled", html.UnescapeString(stripTags(row[1])))
	}
}
