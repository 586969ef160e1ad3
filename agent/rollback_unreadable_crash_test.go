package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLauncher_UnreadableStateRollbackReportedIsNotWithdrawn: 9.9.9 was
// kept, then the machine's state file turned unreadable (its disk, not
// the release): 9.9.9's host exits at every start, and the launcher
// crash-rolls it back to 1.0.0. 1.0.0 stops at the same unreadable state;
// when a host stopping there first said the launcher's rollback, it told
// the controller of this one (failing 9.9.9 fleet-wide), and the launcher,
// seeing 1.0.0 crash-loop too, withdrew it as unreported and ran 9.9.9
// again. A crash rollback is not said from an unreadable state; a trial's
// is (TestLauncher_TrialThatCorruptsTheStateIsRolledBackAndSaysSo).
func TestLauncher_UnreadableStateRollbackReportedIsNotWithdrawn(t *testing.T) {
	srv := newReportServer(t)
	dir := t.TempDir()
	rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	dg := script(t, rel, "exit 1\n")
	kg := filepath.Join(dir, "known-good")
	kgDg := script(t, kg, "exit 1\n")
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}, self: kg,
		st: launcherState{KnownGood: "9.9.9", KnownGoodPath: rel, KnownGoodDigest: dg, Launcher: "1.0.0",
			Previous: &keptRelease{Version: "1.0.0", Path: kg, Digest: kgDg}},
		exits: map[int]chan syscall.WaitStatus{}}
	// The machine's disk: the state file cannot be read by any release.
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(`{"finished": 7, "resou`), 0o600); err != nil {
		t.Fatal(err)
	}
	// 9.9.9 exited five times: put back.
	if !l.crashRollBack(crashLoopExits, "exit status 1") {
		t.Fatal("no crash rollback")
	}
	if err := writeJSONAtomic(identityPath(dir), &Identity{Machine: "m1", Token: "t", Controllers: []string{srv.URL}, Keys: fuzzTrust()}, 0o600); err != nil {
		t.Fatal(err)
	}
	// 1.0.0 starts (this package's Run) and stops at the state.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Run(ctx, Config{StateDir: dir, Root: t.TempDir()}); err == nil {
		t.Fatal("Run read an unreadable state")
	}
	srv.mu.Lock()
	reported := 0
	for _, r := range srv.got {
		if r.Outcome == "rolled_back" && strings.Contains(r.Reason, "9.9.9") {
			reported++
		}
	}
	srv.mu.Unlock()
	// 1.0.0 crash-loops as well: the machine is at fault.
	withdrawn := l.withdrawCrashRollback()
	if reported > 0 && withdrawn {
		t.Fatalf("1.0.0 reported 9.9.9's crash rollback %d time(s) (the controller fails 9.9.9 fleet-wide), then the launcher withdrew it "+
			"as unreported: known-good is %s again, on a machine the controller records as rolled back from it", reported, l.st.KnownGood)
	}
	if reported > 0 {
		t.Fatalf("a crash rollback on a machine no release survives (its state unreadable) was reported: 9.9.9 failed fleet-wide for one machine's disk")
	}
}
