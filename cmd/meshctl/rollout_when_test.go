package main

import (
	"regexp"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_RolloutShowSaysWhen: `meshctl releases show` (and rollout,
// pause, resume, cancel, which print the same) said the rollout's state
// ("State: running") and each machine's ("upgrading") with no time: not
// when the rollout began or ended, nor when a machine's trial began,
// though the API gives created_at, finished_at and each machine's
// started_at and finished_at. A trial begun a second ago and one stuck
// for nine minutes of a ten-minute deadline printed alike.
func TestMeshctl_RolloutShowSaysWhen(t *testing.T) {
	mc := buildMeshctl(t)
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("ops", "admin")
	if r := mc.run("password-of-ops\n", "login", e.URL, "--user", "ops", "--password-stdin"); r.code != 0 {
		t.Fatalf("login: %s", r)
	}
	e.Enroll("m1")
	e.Enroll("m2")
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/1.5.0/rollout", Token: e.Admin, Body: map[string]any{"canary": 1}}, 201, nil)
	out := mc.ok(nil, "releases", "show", "1.5.0").stdout
	when := regexp.MustCompile(`\d+[smhd] ago|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d`)
	var stateLine, m1Line string
	for _, l := range strings.Split(out, "\n") {
		switch f := strings.Fields(l); {
		case len(f) > 0 && f[0] == "State:":
			stateLine = l
		case len(f) > 0 && f[0] == "m1":
			m1Line = l
		}
	}
	if stateLine == "" || m1Line == "" || !strings.Contains(m1Line, "upgrading") {
		t.Fatalf("releases show printed no rollout state or no upgrading m1:\n%s", out)
	}
	if !when.MatchString(stateLine) {
		t.Errorf("releases show says %q: not since when", strings.TrimSpace(stateLine))
	}
	if !when.MatchString(m1Line) {
		t.Errorf("releases show says of m1 %q: upgrading, since no time", strings.TrimSpace(m1Line))
	}
}
