package main

import (
	"strings"
	"testing"
	"time"

	"mesh/client"
	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_RolloutWatchCountsOnlyUpgradedMachines: a rollout to m1 and
// m2 in which m2 is revoked (withdrawn: never upgraded) and m1 upgrades is
// done; `releases watch` said it rolled out to 2 machines where the API
// says one upgraded and one was withdrawn. It counts the upgraded, and
// names the rest.
func TestMeshctl_RolloutWatchCountsOnlyUpgradedMachines(t *testing.T) {
	mc := buildMeshctl(t)
	e := ctltest.Start(t, store.SQLite, ctltest.Options{RolloutEvery: 100 * time.Millisecond})
	e.AddUser("ops", "admin")
	if r := mc.run("password-of-ops\n", "login", e.URL, "--user", "ops", "--password-stdin"); r.code != 0 {
		t.Fatalf("login: %s", r)
	}
	m1 := e.Enroll("m1")
	e.Enroll("m2")
	report := func(body map[string]any) {
		t.Helper()
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: m1.Token, Body: body}, 201, nil)
	}
	d, send := hostPoll(t, e, m1.Token, "1.0.0", "1", 0)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied"})
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	var ro client.Rollout
	mc.ok(&ro, "releases", "rollout", "1.5.0", "--canary", "1", "-o", "json")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m2/revoke", Token: e.Admin, Body: map[string]any{"reason": "lost laptop"}}, 200, nil)

	d, send = hostPoll(t, e, m1.Token, "1.0.0", "1", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied"})
	d, send = hostPoll(t, e, m1.Token, "1.5.0", "1,2", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "upgraded", "host_version": "1.5.0"})

	w := mc.run("", "releases", "watch", "1.5.0")
	var shown struct{ Rollout client.Rollout }
	mc.ok(&shown, "releases", "show", "1.5.0", "-o", "json")
	ro = shown.Rollout
	upgraded := 0
	for _, m := range ro.Machines {
		if m.State == client.RolloutMachineStateUpgraded {
			upgraded++
		}
	}
	t.Logf("the API: rollout %s, machines %+v\nwatch: %s", ro.State, ro.Machines, w)
	if w.code != 0 {
		t.Fatalf("releases watch: %s", w)
	}
	if upgraded != 1 {
		t.Fatalf("setup: %d upgraded, want 1", upgraded)
	}
	if !strings.Contains(w.stdout, "release 1.5.0 rolled out to 1 machine(s) (not reached: 1 withdrawn)") {
		t.Fatalf("releases watch says the release reached 2 machines; the API says %d upgraded and the other withdrawn:\n%s", upgraded, w)
	}
}
