package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mesh/models"
	"mesh/testwait"
)

// TestCrashLoop_ServiceRestartedFailsItsCheck (operator's scenario): a
// build whose service exits at once ("exit 1") while its declared check,
// a separate command, passes. The apply's report said the service healthy
// and the check loop kept saying so while the supervisor restarted it
// every 30 s, so a plan's canary passed and the build went fleet-wide. A
// service its supervisor had to restart is a failing check of itself,
// saying how it exited and how often it was restarted since when, in the
// apply's report and in the checked reports after; once it stays up for
// the settle it passes again.
func TestCrashLoop_ServiceRestartedFailsItsCheck(t *testing.T) {
	a, srv := checkingAgent(t, 200*time.Millisecond)
	sup := a.services.(*supervisor)
	sup.settle = 2 * time.Second
	a.lookNow = make(chan struct{}, 1)
	sup.onExit = func(string) { a.lookSoon() }
	sup.onRestart = func(id string) { a.logs.mark(id, models.LogRestarted) }
	a.logs.src = sup
	marker := filepath.Join(t.TempDir(), "fixed")
	script := "#!/bin/sh\n" +
		`if [ "$1" = --check ]; then exit 0; fi` + "\n" +
		`if [ -f ` + marker + ` ]; then exec sleep 1000; fi` + "\n" +
		"echo 'fatal: cannot bind port' >&2\nexit 1\n"
	d := checkedService(t, a, script, []string{"/opt/x/bin/run", "--check"})
	d.Generation = 2
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Cleanup(func() { _ = a.services.Stop(context.Background(), "mod.service") })

	a.applyWithRetries(ctx, "s2", &verified{digest: "sha256:2", decl: *d})
	check := func(r models.Report) *models.CheckResult {
		for i, c := range r.Checks {
			if c.Resource == "mod.service" {
				return &r.Checks[i]
			}
		}
		return nil
	}
	var applied *models.Report
	for _, r := range srv.reports() {
		if r.Outcome == models.OutcomeApplied && r.Generation == 2 {
			applied = &r
		}
	}
	if applied == nil {
		t.Fatalf("no applied report: %+v", srv.reports())
	}
	if c := check(*applied); c == nil || c.OK || !strings.Contains(c.Detail, "exited: exit status 1") {
		t.Fatalf("the apply's report says of a service that exited at once: %+v", applied.Checks)
	}

	loopDone := make(chan struct{})
	go func() { defer close(loopDone); a.checkLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-loopDone }) // a look in flight writes in the state dir
	// Between applies: failing, with the restarts and since when.
	lastChecked := func() *models.CheckResult {
		rs := srv.reports()
		for i := len(rs) - 1; i >= 0; i-- {
			if rs[i].Outcome == models.OutcomeChecked && rs[i].Generation == 2 {
				return check(rs[i])
			}
		}
		return nil
	}
	seen := ""
	testwait.For(t, 20*time.Second, "a checked report of the restarts", func() bool {
		// What a look says now (a checked report goes out only when the
		// word changes: it stays failing here).
		for _, c := range a.checkAll(ctx, d.Resources, 0) {
			if c.Resource == "mod.service" && !c.OK && strings.Contains(c.Detail, "; restarted ") {
				seen = c.Detail
			}
		}
		return seen != ""
	})
	if !strings.HasPrefix(seen, "exited: exit status 1; restarted ") || !strings.Contains(seen, " since ") {
		t.Fatalf("a restarted service's check says %q", seen)
	}
	for _, r := range srv.reports() {
		if c := check(r); c != nil && c.OK {
			t.Fatalf("a report called the crash-looping service healthy: %s %+v", r.Outcome, r.Checks)
		}
	}
	shipped := false
	for _, r := range srv.reports() {
		for _, l := range r.Logs {
			shipped = shipped || l.Resource == "mod.service" && strings.Contains(strings.Join(l.Lines, "\n"), "fatal: cannot bind port")
		}
	}
	if !shipped {
		t.Fatalf("the crash loop's last lines were not shipped: %+v", srv.reports())
	}

	// Fixed: it stays up past the settle, and a checked report says so.
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 40*time.Second, "a checked report of the service passing", func() bool {
		c := lastChecked()
		return c != nil && c.OK
	})
}

// TestCrashLoop_RestartsOutliveTheHostsRestart: a service restarted by
// the supervisor is failing until it has stayed up for settle. A host
// started again (an upgrade, a crash of the host) adopted it with no
// restarts counted, so it read passing at once between two crashes. The
// pidfile now carries the restarts, and the next host adopts them.
func TestCrashLoop_RestartsOutliveTheHostsRestart(t *testing.T) {
	// It exits at its first two starts, then stays up.
	r, _, host := scriptedService(t, "[ $(wc -l < \"$STARTS\") -ge 3 ] && exec sleep 60\nexit 1\n")
	ctx := context.Background()
	first := host()
	if _, err := first.Ensure(ctx, r, "sha256:1"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "the service up after two restarts", func() bool {
		h := first.health(r.ID)
		return h.failing && h.up > 0 && strings.Contains(h.detail, "restarted 2 times")
	})
	// The host stops (its services run on) and starts again.
	first.Close()
	next := host()
	t.Cleanup(func() { _ = next.Stop(ctx, r.ID); next.Close() })
	if got, err := next.Ensure(ctx, r, "sha256:1"); err != nil || got != "unchanged" {
		t.Fatalf("the service was not adopted: %q %v", got, err)
	}
	if h := next.health(r.ID); !h.failing || !strings.Contains(h.detail, "exited: exit status 1; restarted 2 times") {
		t.Fatalf("after the host's restart the service that restarted twice reads %+v", h)
	}
}

// TestSystemd_RestartedUnitFailsItsCheck: under --services systemd,
// systemd restarts a unit that exits (Restart=always), and only the
// declared check counted: a service that exits at every start beside a
// check that passes read passing. A unit between two starts, or restarted
// and not yet up for restartSettle, is now a failing check of its
// service, as under the host's own supervisor. (systemctl is a stand-in
// that says what systemd would: no systemd runs here.)
func TestSystemd_RestartedUnitFailsItsCheck(t *testing.T) {
	dir := t.TempDir()
	root, err := openMachineRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	props := filepath.Join(t.TempDir(), "props")
	stand := filepath.Join(t.TempDir(), "systemctl")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\ncat "+props+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSystemd(root)
	s.systemctl = stand
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	say := func(state, sub string, restarts int, upFor time.Duration, code, status int) {
		t.Helper()
		started := (ts.Nano() - upFor.Nanoseconds()) / 1000
		b := fmt.Sprintf("ActiveState=%s\nSubState=%s\nNRestarts=%d\nExecMainStartTimestampMonotonic=%d\nExecMainCode=%d\nExecMainStatus=%d\n",
			state, sub, restarts, started, code, status)
		if err := os.WriteFile(props, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The declared check passes throughout.
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "ok"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	check := []string{"/bin/ok"}
	rs := []models.Resource{{ID: "web.service", Kind: "service", Command: []string{"/bin/false"}, Check: &models.Check{Exec: check}}}
	look := func() models.CheckResult {
		t.Helper()
		out := checkServices(context.Background(), root, nil, rs, 0, s)
		if len(out) != 1 {
			t.Fatalf("checks %+v", out)
		}
		return out[0]
	}

	say("active", "running", 0, time.Hour, 0, 0)
	if c := look(); !c.OK {
		t.Fatalf("a unit up an hour, never restarted: %+v", c)
	}
	say("activating", "auto-restart", 1, 0, 1, 3)
	if c := look(); c.OK || !strings.Contains(c.Detail, "exited: exit status 3 (systemd: activating/auto-restart)") {
		t.Fatalf("a unit between two starts: %+v", c)
	}
	say("active", "running", 2, 5*time.Second, 0, 0)
	if c := look(); c.OK || !strings.Contains(c.Detail, "restarted by systemd 2 times since") {
		t.Fatalf("a unit restarted twice, up 5 s: %+v", c)
	}
	say("active", "running", 2, time.Minute, 0, 0)
	if c := look(); !c.OK {
		t.Fatalf("a unit up a minute since its last restart: %+v", c)
	}
	say("active", "running", 3, 2*time.Second, 0, 0)
	if c := look(); c.OK || !strings.Contains(c.Detail, "restarted by systemd 1 time since") {
		t.Fatalf("restarted once more since it settled: %+v", c)
	}
	say("failed", "failed", 3, 0, 2, 9)
	if c := look(); c.OK || !strings.Contains(c.Detail, "exited: killed by SIGKILL (systemd: failed/failed)") {
		t.Fatalf("a unit systemd gave up on: %+v", c)
	}
}
