package agent

import (
	"os"
	"path/filepath"
	"strings"
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
