package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/store"
	"mesh/testwait"
)

// TestHostKilledMidApply_ConvergesWithOneCopy: the host is killed -9 as
// soon as its apply is seen half done (the service started, the report not
// yet in); restarted, it converges and adopts the service: one copy.
func TestHostKilledMidApply_ConvergesWithOneCopy(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	h := enroll(t, c, "m1", c.URL)
	h.start()
	port := freePort(t)
	c.setVars("m1", map[string]string{"port": port})
	c.waitApplied("m1", 30*time.Second)
	gen := c.assign("m1", "node-tools")
	pidfile := filepath.Join(h.State, "services", "node-tools.service.pid")
	waitFor(t, 30*time.Second, "the service's pidfile", func() bool { return exists(pidfile) })
	h.signal(syscall.SIGKILL) // mid-apply: the check and the report are still to come
	if m := c.machine("m1"); m.AppliedGeneration == gen {
		t.Log("the report got out before the kill; the restart still has to adopt, not duplicate")
	}
	h.start()
	c.waitApplied("m1", 30*time.Second)
	waitFor(t, 10*time.Second, "listening", func() bool { return listening(port) })
	if n := copies(port); n != 1 {
		t.Fatalf("%d copies of the service run after the restart", n)
	}
	// The service dies: the adopting supervisor starts it again, once.
	old := svcPID(t, h)
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the service started again", func() bool {
		b, err := os.ReadFile(pidfile)
		return err == nil && !strings.Contains(string(b), fmt.Sprintf(`"pid": %d,`, old)) && listening(port)
	})
	if n := copies(port); n != 1 {
		t.Fatalf("%d copies after the service was restarted", n)
	}
}

// TestControllerOutage_ServicesKeepRunning: with the controller stopped the
// service keeps running and the host retries with backoff; when the
// controller returns, the host catches up with a change made meanwhile.
func TestControllerOutage_ServicesKeepRunning(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	h := enroll(t, c, "m1", c.URL)
	h.start()
	port := freePort(t)
	c.setVars("m1", map[string]string{"port": port})
	c.assign("m1", "node-tools")
	c.waitApplied("m1", 30*time.Second)
	c.stop()
	waitFor(t, 20*time.Second, "the host to notice the outage", func() bool {
		return strings.Contains(h.log.String(), "poll failed; retrying")
	})
	if !listening(port) || copies(port) != 1 {
		t.Fatal("the service stopped with the controller")
	}
	c.start()
	port2 := freePort(t)
	c.setVars("m1", map[string]string{"port": port2})
	c.waitApplied("m1", 60*time.Second)
	waitFor(t, 10*time.Second, "the service on its new port", func() bool { return listening(port2) })
	if copies(port) != 0 || copies(port2) != 1 {
		t.Fatalf("after the change: %d on the old port, %d on the new", copies(port), copies(port2))
	}
}

// TestFailingApply_RejectedAfterAttempts: a generation that cannot be
// applied is retried a bounded number of times, then rejected; the host
// keeps what it had and the controller shows rejected with the cause.
func TestFailingApply_RejectedAfterAttempts(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	c.module("broken")
	c.upload("broken", `{"resources": [{"name": "svc", "kind": "service", "command": ["/opt/missing/bin/run"]}]}`, nil)
	h := enroll(t, c, "m1", c.URL)
	h.start("--max-attempts", "3")
	port := freePort(t)
	c.setVars("m1", map[string]string{"port": port})
	c.assign("m1", "node-tools")
	c.waitApplied("m1", 30*time.Second)
	gen := c.assign("m1", "node-tools", "broken")
	r := c.waitReport("m1", "rejected", "failed 3 attempts")
	if r.Generation != gen || !strings.Contains(r.Reason, "/opt/missing/bin/run") {
		t.Fatalf("rejected report %+v", r)
	}
	m := c.machine("m1")
	if m.State != "rejected" || !strings.Contains(m.LastReason, "failed 3 attempts") {
		t.Fatalf("machine %+v", m)
	}
	failed := 0
	for _, r := range c.reports("m1") {
		if r.Outcome == "failed" && r.Generation == gen {
			failed++
		}
	}
	if failed != 2 {
		t.Fatalf("%d failed attempts reported before the rejection, want 2", failed)
	}
	if !listening(port) {
		t.Fatal("the rejected generation stopped what ran")
	}
	// Bounded: exactly the attempts allowed, journaled, then nothing more.
	entries := 0
	for _, e := range h.journal() {
		if e.Generation == gen {
			entries++
		}
	}
	if entries != 3 {
		t.Fatalf("%d journal entries for the rejected generation, want 3 (2 failed, 1 rejected)", entries)
	}
}

// TestFailingApply_NewerGenerationTakenBetweenAttempts: a generation that
// keeps failing does not keep the host from the one that supersedes it. Its
// retries back off (here 30 s), and the host polls while it waits, so a fix
// assigned after the first failed attempt is applied within seconds, not
// after the failing generation's remaining attempts.
func TestFailingApply_NewerGenerationTakenBetweenAttempts(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	c.module("broken")
	c.upload("broken", `{"resources": [{"name": "svc", "kind": "service", "command": ["/opt/missing/bin/run"]}]}`, nil)
	h := enroll(t, c, "m1", c.URL)
	h.start("--retry", "30s", "--max-attempts", "5")
	c.setVars("m1", map[string]string{"port": freePort(t)})
	c.assign("m1", "node-tools")
	c.waitApplied("m1", 30*time.Second)
	bad := c.assign("m1", "node-tools", "broken")
	if r := c.waitReport("m1", "failed", "/opt/missing/bin/run"); r.Generation != bad {
		t.Fatalf("failed report %+v, want generation %d", r, bad)
	}
	fixed := time.Now()
	good := c.assign("m1", "node-tools")
	c.waitApplied("m1", 20*time.Second)
	if m := c.machine("m1"); m.AppliedGeneration != good {
		t.Fatalf("applied generation %d, want %d", m.AppliedGeneration, good)
	}
	t.Logf("the fix was applied %v after it was assigned", time.Since(fixed).Round(time.Millisecond))
	failed := 0
	for _, r := range c.reports("m1") {
		if r.Generation == bad && r.Outcome == "failed" {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("the superseded generation failed %d times, want once (it was not attempted again)", failed)
	}
}

// TestFullStateDir_ApplyIsReported: the host's state dir fills up (here:
// its outbox directory cannot be made) while the controller is fine. A new
// generation applied on the machine is still reported: the host holds the
// report it could not queue in memory and sends it from there, so the
// controller learns the generation was applied.
func TestFullStateDir_ApplyIsReported(t *testing.T) {
	c := startController(t, store.SQLite)
	c.module("conf")
	c.upload("conf", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/conf", "content": "x=${var.x}\n"}]}`, nil)
	h := enroll(t, c, "m1", c.URL)
	h.start()
	c.setVars("m1", map[string]string{"x": "1"})
	c.assign("m1", "conf")
	c.waitApplied("m1", 30*time.Second)
	ob := filepath.Join(h.State, "outbox")
	if err := os.RemoveAll(ob); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ob, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	gen := c.setVars("m1", map[string]string{"x": "2"})
	conf := filepath.Join(h.Root, "etc/conf")
	waitFor(t, 30*time.Second, "generation applied on the machine", func() bool { b, _ := os.ReadFile(conf); return string(b) == "x=2\n" })
	reported := func() bool {
		for _, r := range c.reports("m1") {
			if r.Generation == gen && r.Outcome == "applied" {
				return true
			}
		}
		return false
	}
	if !testwait.Until(15*time.Second, reported) {
		m := c.machine("m1")
		t.Fatalf("generation %d is applied on m1, yet the controller has no report of it (machine: state %q, applied %d, finished %d, last %q %q)",
			gen, m.State, m.AppliedGeneration, m.FinishedGen, m.LastOutcome, m.LastReason)
	}
}
