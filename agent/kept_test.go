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

	"mesh/testwait"
)

// keptLauncher is a launcher whose known-good is 1.0.0 (kg, the script
// body kgBody) that hands over once to 9.9.9 (the script body relBody),
// waiting 10 ms before starting an exited host again. It runs loop in the
// background until the test ends.
func keptLauncher(t *testing.T, kgBody, relBody func(dir, rel string) string) (dir, dg string) {
	t.Helper()
	dir = t.TempDir()
	rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	dg = script(t, rel, relBody(dir, rel))
	kg := filepath.Join(dir, "known-good")
	script(t, kg, `if [ ! -e `+dir+`/handed ]; then touch `+dir+`/handed
printf '{"version":"9.9.9","digest":"`+dg+`","path":"`+rel+`"}' > `+pendingPath(dir)+`; exit 3; fi
`+kgBody(dir, rel))
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}, self: kg,
		st: launcherState{KnownGood: "1.0.0", KnownGoodPath: kg, Launcher: "1.0.0"}, exits: map[int]chan syscall.WaitStatus{},
		firstWait: 10 * time.Millisecond, look: 10 * time.Millisecond}
	l.probe = func(string) error { return os.ErrPermission }
	reapCtx, stopReap := context.WithCancel(context.Background())
	t.Cleanup(stopReap)
	go l.reap(reapCtx)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- l.loop(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return dir, dg
}

// trialThenCrash is a 9.9.9 that wins its trial (its marker written, as
// a host does once its upgraded report is accepted), then exits 1 at
// every start, as a release that dies at its next generation or boot.
// Each start is counted in <dir>/starts.
func trialThenCrash(dir, _ string) string {
	return `echo x >> ` + dir + `/starts
if [ -n "$` + EnvTrialVersion + `" ]; then echo 9.9.9 > ` + markerPath(dir, "9.9.9") + `; sleep 0.3; fi
exit 1
`
}

// TestLauncher_KeptReleaseThatCrashLoopsIsRolledBack: 9.9.9 wins its
// trial, is kept, and then its host exits at every start. The launcher
// started it again for good (no host reached the controller, nothing was
// said of why); it now puts 1.0.0 back after five quick exits in a row,
// and records the rollback for 1.0.0 to report and to refuse 9.9.9.
func TestLauncher_KeptReleaseThatCrashLoopsIsRolledBack(t *testing.T) {
	dir, dg := keptLauncher(t, func(dir, _ string) string {
		return `touch ` + dir + `/back; exec sleep 600
`
	}, trialThenCrash)
	testwait.For(t, 20*time.Second, "1.0.0 started again after 9.9.9 crash-looped", func() bool {
		_, err := os.Stat(filepath.Join(dir, "back"))
		return err == nil
	})
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err != nil {
		t.Fatalf("no rollback recorded: %v", err)
	}
	if rb.From != "9.9.9" || rb.To != "1.0.0" || rb.Digest != dg || !strings.Contains(rb.Reason, "exited 5 times in a row") ||
		!strings.Contains(rb.Reason, "exit status 1") {
		t.Fatalf("rollback %+v", rb)
	}
	var st launcherState
	if err := readJSON(launcherPath(dir), &st); err != nil {
		t.Fatal(err)
	}
	if st.KnownGood != "1.0.0" || st.Previous != nil {
		t.Fatalf("launcher.json after the rollback: known-good %s, previous %+v", st.KnownGood, st.Previous)
	}
}

// TestLauncher_ProvenReleaseIsNotRolledBack: a kept release whose host has
// run long enough in one go is proven; a crash loop after that is the
// machine's or a declaration's doing, and an older release would not mend
// it: the release before it is forgotten, and nothing is rolled back.
func TestLauncher_ProvenReleaseIsNotRolledBack(t *testing.T) {
	dir := t.TempDir()
	rel := filepath.Join(dir, "9.9.9")
	// Its first start runs past provenIn, then it exits at every start.
	dg := script(t, rel, `echo x >> `+dir+`/starts
if [ ! -e `+dir+`/ran ]; then touch `+dir+`/ran; sleep 0.5; fi
exit 1
`)
	prev := filepath.Join(dir, "1.0.0")
	script(t, prev, "exec sleep 600\n")
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)},
		st: launcherState{KnownGood: "9.9.9", KnownGoodPath: rel, KnownGoodDigest: dg, Launcher: "9.9.9",
			Previous: &keptRelease{Version: "1.0.0", Path: prev}},
		exits: map[int]chan syscall.WaitStatus{}, firstWait: 10 * time.Millisecond, provenIn: 100 * time.Millisecond}
	reapCtx, stopReap := context.WithCancel(context.Background())
	defer stopReap()
	go l.reap(reapCtx)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.loop(ctx, nil) }()
	defer func() { cancel(); <-done }()
	testwait.For(t, 20*time.Second, "9.9.9 started eight times", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "starts"))
		return strings.Count(string(b), "x") >= 8
	})
	if _, err := os.Stat(rollbackPath(dir)); err == nil {
		t.Fatal("a proven release was rolled back")
	}
	l.stMu.Lock()
	defer l.stMu.Unlock()
	if l.st.KnownGood != "9.9.9" || l.st.Previous != nil {
		t.Fatalf("known-good %s, previous %+v: want 9.9.9, the release before it forgotten", l.st.KnownGood, l.st.Previous)
	}
}

// TestLauncher_DamagedKnownGoodRunsTheLaunchersOwn: known-good's binary no
// longer matches its digest (damaged on disk) or cannot be started. The
// launcher returned an error and exited, and the service manager started
// it again to the same end: no host ran at all. It now starts its own
// binary as the host, which fetches the release again.
func TestLauncher_DamagedKnownGoodRunsTheLaunchersOwn(t *testing.T) {
	for name, damage := range map[string]func(path string){
		"Changed": func(path string) { _ = os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o755) },
		"Gone":    func(path string) { _ = os.Remove(path) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			rel := filepath.Join(dir, "9.9.9")
			dg := script(t, rel, "exec sleep 600\n")
			damage(rel)
			own := filepath.Join(dir, "own")
			script(t, own, `touch `+dir+`/own-ran; exec sleep 600
`)
			l := &launcher{cfg: LaunchConfig{StateDir: dir, Log: slog.New(slog.DiscardHandler)},
				st:    launcherState{KnownGood: "9.9.9", KnownGoodPath: rel, KnownGoodDigest: dg, Launcher: "9.9.9"},
				exits: map[int]chan syscall.WaitStatus{}, own: own}
			reapCtx, stopReap := context.WithCancel(context.Background())
			defer stopReap()
			go l.reap(reapCtx)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.loop(ctx, nil) }()
			testwait.For(t, 10*time.Second, "the launcher's own binary running as the host", func() bool {
				select {
				case err := <-done:
					t.Fatalf("the launcher gave up, and no host runs: %v", err)
				default:
				}
				_, err := os.Stat(filepath.Join(dir, "own-ran"))
				return err == nil
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if l.st.KnownGood != "9.9.9" {
				t.Fatalf("known-good became %s: a damaged binary is fetched again, not refused", l.st.KnownGood)
			}
		})
	}
}

// TestLauncher_TrialInterruptedByARestartIsTriedAgain: the machine
// restarted while a launcher was on trial. The stable path's launcher,
// started at boot, refused that release's launcher for good, so the
// launcher never moved to a release again (nothing but launcher_version
// told the controller). A trial started under another boot id is tried
// again, up to launcherRetries times; a trial that fails under the same
// boot is refused as before.
func TestLauncher_TrialInterruptedByARestartIsTriedAgain(t *testing.T) {
	boot := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(boot, []byte("boot-2\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	was := bootIDPath
	bootIDPath = boot
	t.Cleanup(func() { bootIDPath = was })

	startUp := func(dir string, tr launcherTrial, interrupted int) *launcher {
		t.Helper()
		st := launcherState{KnownGood: "9.9.9", KnownGoodPath: tr.Path, KnownGoodDigest: tr.Digest, Launcher: "1.0.0", LauncherTrial: &tr}
		if interrupted > 0 {
			st.LauncherInterrupted = map[string]int{tr.Digest: interrupted}
		}
		l := &launcher{cfg: LaunchConfig{StateDir: dir, Log: slog.New(slog.DiscardHandler)}, self: tr.FromPath, st: st}
		if err := l.startUp(); err != nil {
			t.Fatal(err)
		}
		return l
	}
	dir := t.TempDir()
	tr := launcherTrial{Version: "9.9.9", Path: filepath.Join(dir, "9.9.9"), Digest: "sha256:99", From: "1.0.0", FromPath: filepath.Join(dir, "1.0.0"), Boot: "boot-1"}
	if err := EnsureStablePath(dir, tr.FromPath); err != nil {
		t.Fatal(err)
	}

	l := startUp(dir, tr, 0)
	if len(l.st.LauncherRefused) != 0 || l.st.LauncherRetry == nil || l.st.LauncherRetry.Digest != "sha256:99" || l.st.LauncherTrial != nil {
		t.Fatalf("a trial the restart interrupted: refused %v, retry %+v", l.st.LauncherRefused, l.st.LauncherRetry)
	}
	// The retry moves to the release once known-good's host runs.
	moved := ""
	l.probe = func(string) error { return nil }
	l.exec = func(path string, _, _ []string) error { moved = path; return syscall.ENOSYS }
	l.retryLauncher(context.Background(), os.Getpid())
	if moved != tr.Path {
		t.Fatalf("the interrupted launcher trial was not tried again (moved to %q)", moved)
	}

	// Interrupted as many times as it may be: refused.
	dir2 := t.TempDir()
	if err := EnsureStablePath(dir2, tr.FromPath); err != nil {
		t.Fatal(err)
	}
	if l := startUp(dir2, tr, launcherRetries); len(l.st.LauncherRefused) != 1 || !strings.Contains(l.st.LauncherFailure, "restarted during it") {
		t.Fatalf("a trial interrupted %d times: refused %v, %q", launcherRetries+1, l.st.LauncherRefused, l.st.LauncherFailure)
	}
	// Started again under the same boot: the launcher on trial died.
	dir3 := t.TempDir()
	if err := EnsureStablePath(dir3, tr.FromPath); err != nil {
		t.Fatal(err)
	}
	same := tr
	same.Boot = "boot-2"
	if l := startUp(dir3, same, 0); len(l.st.LauncherRefused) != 1 || l.st.LauncherRetry != nil {
		t.Fatalf("a launcher trial that died under the same boot: refused %v, retry %+v", l.st.LauncherRefused, l.st.LauncherRetry)
	}
}
