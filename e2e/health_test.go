package e2e

import (
	"archive/tar"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestPlan_HaltsOnFailingCheckThenRollsBack, with real hosts: build 2's
// service check fails on the canary. The canary turns unhealthy with what
// the check said, the plan halts naming it, and the second tier never
// receives build 2 (it used to hang silently in running while the canary
// showed current). Rolled back, the canary runs build 1 again under a pin
// that says why; build 3's plan lifts the pin and reaches every machine.
func TestPlan_HaltsOnFailingCheckThenRollsBack(t *testing.T) {
	c := startController(t, store.SQLite, "--unhealthy-after", "2s")
	c.module("node-tools")
	broken := strings.Replace(runtimeManifest, `"check": {"tcp": "127.0.0.1:${var.port}"}`, `"check": {"tcp": "127.0.0.1:1"}`, 1)
	c.upload("node-tools", runtimeManifest, runtimeTree(t))
	for _, n := range []string{"m1", "m2"} {
		h := enroll(t, c, n, c.URL)
		h.start("--check-every", "1s")
		c.setVars(n, map[string]string{"port": freePort(t)})
		c.assign(n, "node-tools")
		c.waitApplied(n, 60*time.Second)
	}
	running := func(n string) int64 { return c.machine(n).Running["node-tools"].Build }
	plan := func() planView {
		var ps struct{ Items []planView }
		c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: c.Admin}, 200, &ps)
		return ps.Items[0]
	}

	c.upload("node-tools", broken, runtimeTree(t)) // build 2: a plan
	var p planView
	waitFor(t, 90*time.Second, "the plan of build 2 halted", func() bool { p = plan(); return p.State == "halted" })
	if !strings.Contains(p.Reason, "tier 1 of 2 (canary): m1 check node-tools.service unhealthy since") {
		t.Fatalf("the halted plan's reason: %q", p.Reason)
	}
	m1 := c.machine("m1")
	if m1.State != "unhealthy" || m1.Health.State != "failing" || m1.Health.Check != "node-tools.service" || m1.Health.Detail == "" {
		t.Fatalf("the canary: state %s, health %+v", m1.State, m1.Health)
	}
	if b := running("m2"); b != 1 || p.Steps[1].State != "pending" {
		t.Fatalf("the second tier was reached: m2 runs build %d, step %s", b, p.Steps[1].State)
	}

	var rolled planView
	c.JSON(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/plans/%d/rollback", p.ID), Token: c.Admin}, 200, &rolled)
	if rolled.State != "rolled_back" {
		t.Fatalf("after rollback: %+v", rolled)
	}
	var as struct {
		Assignments []struct {
			Build  *int64 `json:"build"`
			Reason string `json:"reason"`
		} `json:"assignments"`
	}
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: c.Admin}, 200, &as)
	if len(as.Assignments) != 1 || as.Assignments[0].Build == nil || *as.Assignments[0].Build != 1 ||
		as.Assignments[0].Reason != fmt.Sprintf("rollback of plan %d", p.ID) {
		t.Fatalf("m1's pin: %+v", as.Assignments)
	}
	waitFor(t, 60*time.Second, "m1 runs build 1 again, healthy", func() bool {
		m := c.machine("m1")
		return m.Running["node-tools"].Build == 1 && m.State == "current" && m.Health.State == "passing"
	})

	c.upload("node-tools", runtimeManifest, runtimeTree(t)) // build 3: healthy
	waitFor(t, 120*time.Second, "the plan of build 3 done", func() bool { return plan().State == "done" })
	for _, n := range []string{"m1", "m2"} {
		if b := running(n); b != 3 {
			t.Fatalf("%s runs build %d after build 3's plan", n, b)
		}
	}
	as.Assignments = nil // absent fields (an unpinned build) must not keep the last read's
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: c.Admin}, 200, &as)
	if as.Assignments[0].Build != nil {
		t.Fatalf("build 3's plan did not lift the rollback's pin: build %d %q", *as.Assignments[0].Build, as.Assignments[0].Reason)
	}
}

// TestPlan_CrashLoopingCanaryHalts, with real hosts (the operator's
// scenario): build 2's service exits at once ("exit 1") while its declared
// check, a separate command, passes. The host's supervisor restarted it
// again and again, yet the canary was judged applied a second after its
// report, the plan went fleet-wide, the build became current and every
// machine read current and passing. The restarted service is a failing
// check of itself: the plan halts at its canary, saying which service and
// why, the second tier never receives build 2, and the crash loop's own
// lines are what the canary shipped.
func TestPlan_CrashLoopingCanaryHalts(t *testing.T) {
	c := startController(t, store.SQLite, "--unhealthy-after", "2s")
	c.module("node-tools")
	c.upload("node-tools", runtimeManifest, runtimeTree(t))
	for _, n := range []string{"m1", "m2"} {
		h := enroll(t, c, n, c.URL)
		h.start("--check-every", "1s")
		c.setVars(n, map[string]string{"port": freePort(t)})
		c.assign(n, "node-tools")
		c.waitApplied(n, 60*time.Second)
	}
	plan := func() planView {
		var ps struct{ Items []planView }
		c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: c.Admin}, 200, &ps)
		return ps.Items[0]
	}

	crash := `{"resources": [
  {"name": "runtime", "kind": "tree", "path": "/opt/node-tools"},
  {"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run"], "after": ["runtime"],
   "check": {"exec": ["/opt/node-tools/bin/check"]}}
]}`
	tree := tarball(t,
		entry{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "bin/run", body: "#!/bin/sh\necho 'fatal: cannot bind port' >&2\nexit 1\n", mode: 0o755},
		entry{name: "bin/check", body: "#!/bin/sh\nexit 0\n", mode: 0o755})
	c.upload("node-tools", crash, tree) // build 2: a plan
	var p planView
	waitFor(t, 90*time.Second, "the plan of build 2 halted (or done)", func() bool {
		p = plan()
		return p.State == "halted" || p.State == "done"
	})
	if p.State != "halted" || !strings.Contains(p.Reason, "tier 1 of 2 (canary): m1 check node-tools.service unhealthy since") ||
		!strings.Contains(p.Reason, "exited: exit status 1; restarted ") {
		t.Fatalf("the plan of a crash-looping build: %s %q", p.State, p.Reason)
	}
	m1 := c.machine("m1")
	if m1.State != "unhealthy" || m1.Health.State != "failing" || m1.Health.Check != "node-tools.service" ||
		!strings.HasPrefix(m1.Health.Detail, "exited: exit status 1") {
		t.Fatalf("the canary: state %s, health %+v", m1.State, m1.Health)
	}
	if b := c.machine("m2").Running["node-tools"].Build; b != 1 || p.Steps[1].State != "pending" {
		t.Fatalf("the second tier was reached: m2 runs build %d, step %s", b, p.Steps[1].State)
	}
	var l struct {
		Items []struct {
			Why   string   `json:"why"`
			Lines []string `json:"lines"`
		}
	}
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs?resource=node-tools.service", Token: c.Admin}, 200, &l)
	if len(l.Items) != 1 || !strings.Contains(strings.Join(l.Items[0].Lines, "\n"), "fatal: cannot bind port") {
		t.Fatalf("m1's shipped lines of the service: %+v", l.Items)
	}
}
