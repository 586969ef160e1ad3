package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLauncher_ExitAfterReconcileKept: a trial host that completed its
// reconcile (its upgraded report accepted, the marker written) and exits
// before the launcher looks is kept, not rolled back: rolled back, the host
// refused for good a release its controller had recorded it as running.
func TestLauncher_ExitAfterReconcileKept(t *testing.T) {
	dir, rel, l := tryScript(t, func(dir string) string { return "echo 9.9.9 > " + markerPath(dir, "9.9.9") + "; exit 1\n" }, 10*time.Second, 0)
	var rb rollback
	if readJSON(rollbackPath(dir), &rb) == nil {
		t.Fatalf("rolled back although the trial reconciled: %+v", rb)
	}
	if l.st.KnownGood != "9.9.9" || l.st.KnownGoodPath != rel {
		t.Fatalf("known-good is %s (%s), want the reconciled 9.9.9", l.st.KnownGood, l.st.KnownGoodPath)
	}
}

// TestLauncher_MarkerAtTheDeadlineKept: the trial completed its reconcile
// (its upgraded report accepted, the marker written) after the launcher's
// last look and before its deadline. Rolled back at the deadline without
// a look, the host would run the release the controller recorded it as
// leaving; it is kept.
func TestLauncher_MarkerAtTheDeadlineKept(t *testing.T) {
	// No look before the deadline: only the deadline can see the marker.
	dir, _, l := tryScript(t, func(dir string) string { return "echo 9.9.9 > " + markerPath(dir, "9.9.9") + "; sleep 1.5\n" }, time.Second, time.Hour)
	var rb rollback
	if readJSON(rollbackPath(dir), &rb) == nil {
		t.Fatalf("rolled back although the trial's marker was there at the deadline: %+v", rb)
	}
	if l.st.KnownGood != "9.9.9" {
		t.Fatalf("known-good is %s, want the reconciled 9.9.9", l.st.KnownGood)
	}
}

// TestRollback_RecordKeptUntilWritten: the launcher's record of a rollback
// is removed only once the rolled_back report is queued and the refusal of
// the release saved; on a full disk both were lost, and the failed release
// could be fetched again after a restart.
func TestRollback_RecordKeptUntilWritten(t *testing.T) {
	dir := t.TempDir()
	if err := writeJSONAtomic(rollbackPath(dir), rollback{From: "9.9.9", To: "1.0.0", Digest: "sha256:aa", Reason: "x"}, 0o600); err != nil {
		t.Fatal(err)
	}
	// The outbox's directory a file, and the state file a directory: both
	// writes fail, as on a full disk.
	if err := os.WriteFile(filepath.Join(dir, "outbox"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(statePath(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: Config{StateDir: dir, Log: slog.New(slog.DiscardHandler)}, state: &State{Resources: map[string]*Managed{}},
		outbox: outbox{dir: filepath.Join(dir, "outbox"), stateDir: dir, log: slog.New(slog.DiscardHandler)}, logs: &logShipper{},
		client: newClient(&Identity{Controllers: []string{"http://127.0.0.1:1"}, Token: "t"})} // the report, held, is not sent either
	a.reportRollback(context.Background())
	if _, err := os.Stat(rollbackPath(dir)); err != nil {
		t.Fatalf("the rollback's record was removed though neither the report nor the refusal was written: %v", err)
	}
}

// TestLauncher_BinaryOfAnotherVersionRolledBackSayingSo: a release
// published with another version's binary was tried, staged itself again
// on trial (it saw its release named) and exited: the rollback said only
// "exit status 3". The launcher asks the binary first and says why.
func TestLauncher_BinaryOfAnotherVersionRolledBackSayingSo(t *testing.T) {
	dir, _, _ := tryScript(t, func(string) string {
		return "if [ \"$1\" = version ]; then echo 'mesh-host 1.5.0 (build x)'; exit 0; fi; exit 3\n"
	}, 10*time.Second, 0)
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err != nil || !strings.Contains(rb.Reason, "its binary is mesh-host 1.5.0, not 9.9.9") {
		t.Fatalf("rollback %+v (%v), want it to say the binary is 1.5.0", rb, err)
	}
}

// tryScript stages a release 9.9.9 whose binary is the shell script body
// (its marker at markerPath(dir, "9.9.9")) and runs its trial under a
// launcher whose known-good is 1.0.0, with the trial deadline and how
// often it looks for the marker (0: the launcher's own); it returns once
// the trial has ended.
func tryScript(t *testing.T, body func(dir string) string, deadline, look time.Duration) (dir, rel string, l *launcher) {
	t.Helper()
	dir = t.TempDir()
	rel = filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	dg := script(t, rel, body(dir))
	if err := writeJSONAtomic(pendingPath(dir), pending{Version: "9.9.9", Digest: dg, Path: rel}, 0o600); err != nil {
		t.Fatal(err)
	}
	l = &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: deadline, Log: slog.New(slog.DiscardHandler)},
		st: launcherState{KnownGood: "1.0.0", KnownGoodPath: "/bin/true"}, exits: map[int]chan syscall.WaitStatus{}, look: look}
	l.probe = func(string) error { return os.ErrPermission }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.reap(ctx)
	kept, err := l.tryRelease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kept != nil {
		// Kept and running: the loop would supervise it.
		stop(kept.p, kept.exited)
	}
	return dir, rel, l
}

// TestLauncher_TrialHandedBackIsNotARollback: the release on trial is
// handed a declaration naming the known-good release (its rollout halted
// elsewhere or was cancelled, and the target went back) and stages it,
// exiting to hand over. Nothing was learnt of the release: the launcher
// goes back to known-good without recording a rollback, so the host does
// not refuse the release for good.
func TestLauncher_TrialHandedBackIsNotARollback(t *testing.T) {
	dir, _, l := tryScript(t, func(dir string) string {
		return "printf '{\"version\":\"1.0.0\",\"digest\":\"sha256:x\",\"path\":\"/bin/true\"}' > " + pendingPath(dir) + "; exit 3\n"
	}, 10*time.Second, 0)
	var rb rollback
	if readJSON(rollbackPath(dir), &rb) == nil {
		t.Fatalf("a trial handed back before its verdict recorded as a rollback: %+v", rb)
	}
	if _, err := os.Stat(pendingPath(dir)); err == nil {
		t.Fatal("the hand-over back to known-good was left staged")
	}
	if l.st.KnownGood != "1.0.0" {
		t.Fatalf("known-good is %s, want 1.0.0", l.st.KnownGood)
	}
}

// TestLauncher_TrialFailedThenHandedBackIsARollback: the controller refused
// the trial's upgraded report (it failed the trial) before the declaration
// moved the machine back: that hand-over is the release's rollback,
// recorded, so the host refuses the release from then on.
func TestLauncher_TrialFailedThenHandedBackIsARollback(t *testing.T) {
	dir, _, _ := tryScript(t, func(dir string) string {
		return "echo refused > " + trialRefusedPath(dir, "9.9.9") + "; printf '{\"version\":\"1.0.0\",\"digest\":\"sha256:x\",\"path\":\"/bin/true\"}' > " + pendingPath(dir) + "; exit 3\n"
	}, 10*time.Second, 0)
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err != nil || rb.From != "9.9.9" {
		t.Fatalf("a failed trial handed back was not recorded as a rollback: %+v %v", rb, err)
	}
	// Its reason is the controller's (it said only how the host exited:
	// "exit status 3", the cause on the release's record alone).
	if !strings.Contains(rb.Reason, "the controller failed its trial: refused") {
		t.Fatalf("the rollback of a trial the controller failed says %q", rb.Reason)
	}
	if _, err := os.Stat(trialRefusedPath(dir, "9.9.9")); err == nil {
		t.Fatal("the refused trial's note was left behind")
	}
}

// TestLauncher_RollbackOnAFullDiskStartsKnownGood: release 9.9.9 crashes
// on trial while the state dir cannot take a new file (full disk; here
// rollback.json is in the way). Known-good is started all the same (the
// launcher exited, and no host ran), told of the rollback in its
// environment, to report it and refuse the release.
func TestLauncher_RollbackOnAFullDiskStartsKnownGood(t *testing.T) {
	dir := t.TempDir()
	rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	dg := script(t, rel, "exit 1\n")
	kg := filepath.Join(dir, "known-good")
	ran := filepath.Join(dir, "known-good-ran")
	// Known-good hands over to 9.9.9 once, then runs.
	script(t, kg, `if [ ! -e `+dir+`/handed ]; then touch `+dir+`/handed
printf '{"version":"9.9.9","digest":"`+dg+`","path":"`+rel+`"}' > `+pendingPath(dir)+`; exit 3; fi
printf %s "$`+EnvRollback+`" > `+ran+`; exec sleep 600
`)
	// The rollback record cannot be written.
	if err := os.Mkdir(rollbackPath(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}, self: kg,
		st: launcherState{KnownGood: "1.0.0", KnownGoodPath: kg, Launcher: "1.0.0"}, exits: map[int]chan syscall.WaitStatus{}}
	l.probe = func(string) error { return os.ErrPermission }
	reapCtx, stopReap := context.WithCancel(context.Background())
	defer stopReap()
	go l.reap(reapCtx)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if err := l.loop(ctx, nil); err != nil {
		t.Fatalf("the launcher gave up after the trial failed, and no host runs: %v", err)
	}
	b, err := os.ReadFile(ran)
	if err != nil {
		t.Fatal("known-good was not started again after the failed trial")
	}
	var rb rollback
	if err := json.Unmarshal(b, &rb); err != nil || rb.From != "9.9.9" || rb.To != "1.0.0" || rb.Digest != dg {
		t.Fatalf("known-good was told of the rollback %q (%v), want 9.9.9 to 1.0.0", b, err)
	}
}

// TestRollback_FromTheEnvironmentIsReported: a rollback the launcher could
// not record in rollback.json comes in the host's environment, and is
// reported and its release refused as a recorded one is.
func TestRollback_FromTheEnvironmentIsReported(t *testing.T) {
	b, _ := json.Marshal(rollback{From: "9.9.9", To: "1.0.0", Digest: "sha256:r", Reason: "exited early"})
	t.Setenv(EnvRollback, string(b))
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	a.id = &Identity{}
	a.reportRollback(context.Background())
	if got := srv.reports(); len(got) != 1 || got[0].Outcome != "rolled_back" || !strings.Contains(got[0].Reason, "9.9.9") {
		t.Fatalf("reports %+v, want the rollback from 9.9.9", got)
	}
	if len(a.state.RefusedReleases) != 1 || a.state.RefusedReleases[0] != "sha256:r" {
		t.Fatalf("refused releases %v", a.state.RefusedReleases)
	}
}

// TestLauncher_ATrialTheControllerFailedIsRolledBackInItsWords: the
// controller refused the trial's upgraded report and the host ran on to
// the trial's deadline: the rollback's reason said only that no reconcile
// completed in time, the controller's cause left on the release's record.
func TestLauncher_ATrialTheControllerFailedIsRolledBackInItsWords(t *testing.T) {
	dir, _, _ := tryScript(t, func(dir string) string {
		return "echo 'its trial poll advertised schemas 1,2; release 9.9.9 records 1' > " + trialRefusedPath(dir, "9.9.9") + "; exec sleep 60\n"
	}, time.Second, 0)
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err != nil || rb.From != "9.9.9" {
		t.Fatalf("the failed trial was not rolled back: %+v %v", rb, err)
	}
	if !strings.Contains(rb.Reason, "the controller failed its trial: its trial poll advertised schemas 1,2") {
		t.Fatalf("the rollback of a trial the controller failed says %q", rb.Reason)
	}
}
