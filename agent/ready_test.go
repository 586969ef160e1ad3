package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/testwait"
)

// trialThen is a 9.9.9 that wins its trial (saying it got through its
// start when says, its marker written) and exits, then at every later
// start runs later (a shell line). Each start is counted in <dir>/starts.
func trialThen(says bool, later string) func(dir, _ string) string {
	return func(dir, _ string) string {
		ready := ""
		if says {
			ready = "echo ready >&3; "
		}
		return `echo x >> ` + dir + `/starts
if [ -n "$` + EnvTrialVersion + `" ]; then ` + ready + `echo 9.9.9 > ` + markerPath(dir, "9.9.9") + `; sleep 0.3; exit 1; fi
` + later + "\n"
	}
}

// TestLauncher_KeptReleaseThatHangsAtItsStartIsRolledBack: 9.9.9 wins its
// trial, saying it got through its start, is kept, and then hangs at
// every start (no exit, no poll). The launcher had nothing to act on: it
// kept 9.9.9 for good, and proved it after an hour. Each start that does
// not say it got through is now stopped and counted as an exit, and five
// in a row put 1.0.0 back, recorded for it to report.
func TestLauncher_KeptReleaseThatHangsAtItsStartIsRolledBack(t *testing.T) {
	dir, dg := keptLauncher(t, func(dir, _ string) string {
		return `touch ` + dir + `/back; exec sleep 600`
	}, trialThen(true, "exec sleep 600"))
	testwait.For(t, 25*time.Second, "1.0.0 started again after 9.9.9 hung at its starts", func() bool {
		_, err := os.Stat(filepath.Join(dir, "back"))
		return err == nil
	})
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err != nil {
		t.Fatalf("no rollback recorded: %v", err)
	}
	if rb.From != "9.9.9" || rb.To != "1.0.0" || rb.Digest != dg || !strings.Contains(rb.Reason, "did not get through its start within 300ms") {
		t.Fatalf("rollback %+v", rb)
	}
}

// TestLauncher_AHostThatSaysItStartedIsLeftRunning: the release says it
// got through its start at each start, or never said so at all (a release
// of an earlier launcher's time, which hangs as a host of it may seem
// to): either way its host runs on, and is proven (a host stopped every
// 300 ms never runs the second it takes).
func TestLauncher_AHostThatSaysItStartedIsLeftRunning(t *testing.T) {
	for name, rel := range map[string]func(dir, _ string) string{
		"SaysItEachTime": trialThen(true, "echo ready >&3; exec sleep 600"),
		"NeverSaysIt":    trialThen(false, "exec sleep 600"),
	} {
		t.Run(name, func(t *testing.T) {
			dir, _ := keptLauncherWith(t, func(dir, _ string) string { return "exec sleep 600" }, rel,
				func(l *launcher) { l.provenIn = time.Second })
			testwait.For(t, 20*time.Second, "9.9.9 proven", func() bool {
				var st launcherState
				return readJSON(launcherPath(dir), &st) == nil && st.KnownGood == "9.9.9" && st.Previous == nil
			})
			if _, err := os.Stat(rollbackPath(dir)); err == nil {
				t.Fatal("a rollback was recorded")
			}
		})
	}
}

// TestLauncher_AnOldHostsServicesDoNotHoldTheLauncher: a host of a release
// before MESH_HOST_READY_FD does not close descriptor 3 on exec, so every
// service it starts holds its start's ready pipe open. The launcher's
// reader of that pipe (a goroutine and a descriptor) lived as long as the
// service: one more at each start of such a host. The launcher closes its
// end when the host exits.
func TestLauncher_AnOldHostsServicesDoNotHoldTheLauncher(t *testing.T) {
	dir := t.TempDir()
	kg := filepath.Join(dir, "old-host")
	script(t, kg, `sleep 600 & echo $! >> `+dir+`/services
exit 1
`)
	t.Cleanup(func() {
		b, _ := os.ReadFile(filepath.Join(dir, "services"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}, self: kg,
		st: launcherState{KnownGood: "1.0.0", KnownGoodPath: kg, Launcher: "1.0.0"}, exits: map[int]chan syscall.WaitStatus{},
		firstWait: 10 * time.Millisecond, look: 10 * time.Millisecond}
	reapCtx, stopReap := context.WithCancel(context.Background())
	defer stopReap()
	go l.reap(reapCtx)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.loop(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "services"))
	if starts := len(strings.Fields(string(b))); starts < 3 {
		t.Fatalf("the old host started %d times", len(strings.Fields(string(b))))
	}
	readers := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "(*launcher).awaitReady")
	}
	testwait.For(t, 10*time.Second, "no reader left of an exited host's ready pipe", func() bool { return readers() == 0 })
}
