package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mesh/testwait"
	"mesh/version"
)

// keptLauncher is a launcher whose known-good is 1.0.0 (kg, the script
// body kgBody) that hands over once to 9.9.9 (the script body relBody),
// waiting 10 ms before starting an exited host again. It runs loop in the
// background until the test ends.
func keptLauncher(t *testing.T, kgBody, relBody func(dir, rel string) string) (dir, dg string) {
	t.Helper()
	return keptLauncherWith(t, kgBody, relBody, nil)
}

// keptLauncherWith is keptLauncher with the launcher's settings changed
// by set (nil: none) before it runs. A host has 300 ms to say it got
// through its start.
func keptLauncherWith(t *testing.T, kgBody, relBody func(dir, rel string) string, set func(*launcher)) (dir, dg string) {
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
		firstWait: 10 * time.Millisecond, look: 10 * time.Millisecond, readyIn: 300 * time.Millisecond}
	l.probe = func(string) error { return os.ErrPermission }
	if set != nil {
		set(l)
	}
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
// it again to the same end: no host ran at all. Its own binary is now
// known-good in its place, and that host fetches the release again.
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
			// The launcher's own release is known-good now: a failed trial
			// of 9.9.9 fetched again goes back to it, not to 9.9.9. Nothing
			// is refused: the release is fetched again.
			if l.st.KnownGood != version.Version || l.st.KnownGoodPath != own {
				t.Fatalf("known-good is %s at %s, want the launcher's own %s", l.st.KnownGood, l.st.KnownGoodPath, version.Version)
			}
			if _, err := os.Stat(rollbackPath(dir)); err == nil {
				t.Fatal("a damaged known-good was recorded as a rollback: its release would be refused")
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

// runLoop runs l's reaper and loop until the test ends; the returned stop
// ends the loop and waits for it.
func runLoop(t *testing.T, l *launcher) (stop func()) {
	t.Helper()
	reapCtx, stopReap := context.WithCancel(context.Background())
	go l.reap(reapCtx)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.loop(ctx, nil) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("loop: %v", err)
			}
			stopReap()
		})
	}
	t.Cleanup(stop)
	return stop
}

func countIn(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "x")
}

// TestLauncher_KeptWithoutMovingIsProvenToo: 9.9.9 wins its trial and is
// kept, but the launcher does not move to it (its probe fails: a release
// from before the hand-over, or a launcher refused before), so tryRelease
// supervises the kept host itself. That host runs past provenIn in one go
// (in production: hours), then exits, and from then on exits at every
// start (a declaration, the machine). Once the kept release has run an
// hour in one go the release before it is forgotten and a crash loop is
// not rolled back; tryRelease's own supervision of the kept host never
// started that timer, so the release was rolled back and refused all the
// same. The loop supervises it now, as any known-good host.
func TestLauncher_KeptWithoutMovingIsProvenToo(t *testing.T) {
	dir := t.TempDir()
	rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	// On trial: reconciles, then runs 1 s in one go (five times provenIn)
	// and exits; every later start exits at once.
	dg := script(t, rel, `echo x >> `+dir+`/starts
if [ -n "$`+EnvTrialVersion+`" ]; then echo 9.9.9 > `+markerPath(dir, "9.9.9")+`; sleep 1; fi
exit 1
`)
	kg := filepath.Join(dir, "known-good")
	script(t, kg, `if [ ! -e `+dir+`/handed ]; then touch `+dir+`/handed
printf '{"version":"9.9.9","digest":"`+dg+`","path":"`+rel+`"}' > `+pendingPath(dir)+`; exit 3; fi
touch `+dir+`/back; exec sleep 600
`)
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}, self: kg,
		st: launcherState{KnownGood: "1.0.0", KnownGoodPath: kg, Launcher: "1.0.0"}, exits: map[int]chan syscall.WaitStatus{},
		firstWait: 10 * time.Millisecond, look: 10 * time.Millisecond, provenIn: 200 * time.Millisecond}
	l.probe = func(string) error { return os.ErrPermission } // the launcher stays
	runLoop(t, l)
	testwait.For(t, 20*time.Second, "9.9.9 started seven times, or rolled back", func() bool {
		_, err := os.Stat(rollbackPath(dir))
		return err == nil || countIn(filepath.Join(dir, "starts")) >= 7
	})
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err == nil {
		t.Fatalf("9.9.9 ran 1s in one go after its trial (provenIn 200ms) and was rolled back all the same: %+v", rb)
	}
}

// TestLauncher_CrashRollbackCarriesAnUnreportedOne: 2.0.0 is kept
// (1.0.0 before it). It hands over to 3.0.0, whose trial fails:
// rollback.json records 3.0.0's rollback, for 2.0.0 to report and to
// refuse 3.0.0. 2.0.0 then exits at every start before it reports (what
// the failed trial left, e.g. state it cannot read). The crash rollback
// writes its own record over 3.0.0's: 1.0.0 reports only that 2.0.0 was
// rolled back (the controller fails 2.0.0 fleet-wide) and is never told
// that 3.0.0 failed its trial here, so it does not refuse 3.0.0 and
// fetches and tries it again.
func TestLauncher_CrashRollbackCarriesAnUnreportedOne(t *testing.T) {
	dir := t.TempDir()
	three := filepath.Join(dir, "versions", "3.0.0", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(three), 0o700); err != nil {
		t.Fatal(err)
	}
	dg3 := script(t, three, "exit 1\n") // fails its trial
	two := filepath.Join(dir, "2.0.0")
	dg2 := script(t, two, `if [ ! -e `+dir+`/handed ]; then touch `+dir+`/handed
printf '{"version":"3.0.0","digest":"`+dg3+`","path":"`+three+`"}' > `+pendingPath(dir)+`; exit 3; fi
exit 1
`)
	one := filepath.Join(dir, "1.0.0")
	told := filepath.Join(dir, "told")
	script(t, one, `{ cat `+rollbackPath(dir)+`; printf '%s' "$`+EnvRollback+`"; } > `+told+`.tmp; mv `+told+`.tmp `+told+`
exec sleep 600
`)
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}, self: two,
		st: launcherState{KnownGood: "2.0.0", KnownGoodPath: two, KnownGoodDigest: dg2, Launcher: "2.0.0",
			Previous: &keptRelease{Version: "1.0.0", Path: one}},
		exits: map[int]chan syscall.WaitStatus{}, firstWait: 10 * time.Millisecond, look: 10 * time.Millisecond}
	l.probe = func(string) error { return os.ErrPermission }
	runLoop(t, l)
	testwait.For(t, 20*time.Second, "1.0.0 started after 2.0.0 crash-looped", func() bool {
		_, err := os.Stat(told)
		return err == nil
	})
	b, _ := os.ReadFile(told)
	if !strings.Contains(string(b), dg3) {
		t.Fatalf("1.0.0 is not told that 3.0.0 (%s) failed its trial here; it was told only:\n%s", dg3, b)
	}
}

// TestLauncher_OwnImageCrashesBlameNoRelease: known-good 9.9.9's
// binary is gone, so the launcher runs its own image in its place; that
// host exits at once (an older build that cannot read the state, say).
// The operator puts the binary back; 9.9.9 then exited once, and was
// rolled back and refused at that first exit: the exits of the
// launcher's own binary were counted as its. The own image is known-good
// now, with no release before it: nothing is rolled back.
func TestLauncher_OwnImageCrashesBlameNoRelease(t *testing.T) {
	dir := t.TempDir()
	rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	kgStarts := filepath.Join(dir, "kg-starts")
	dg := script(t, rel, `echo x >> `+kgStarts+`
exit 1
`)
	backup := filepath.Join(dir, "backup")
	b, err := os.ReadFile(rel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(backup, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(rel); err != nil {
		t.Fatal(err)
	}
	// The own image exits at once; at its fourth start the operator has
	// put known-good's binary back (intact: it matches its digest). Only
	// the fourth writes it: a start copying it again as the test ended
	// wrote into the directory the test's cleanup was removing.
	own := filepath.Join(dir, "own")
	script(t, own, `echo x >> `+dir+`/own-starts
if [ "$(grep -c x `+dir+`/own-starts)" -eq 4 ]; then cp `+backup+` `+rel+`.tmp && mv `+rel+`.tmp `+rel+`; fi
exit 1
`)
	prev := filepath.Join(dir, "1.0.0")
	script(t, prev, "exec sleep 600\n")
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)},
		st: launcherState{KnownGood: "9.9.9", KnownGoodPath: rel, KnownGoodDigest: dg, Launcher: "9.9.9",
			Previous: &keptRelease{Version: "1.0.0", Path: prev}},
		exits: map[int]chan syscall.WaitStatus{}, firstWait: 10 * time.Millisecond, own: own}
	runLoop(t, l)
	testwait.For(t, 20*time.Second, "the own image started eight times, or a rollback", func() bool {
		_, err := os.Stat(rollbackPath(dir))
		return err == nil || countIn(filepath.Join(dir, "own-starts")) >= 8
	})
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err == nil {
		t.Fatalf("9.9.9 rolled back after %d exit(s) of its own (the rest were the launcher's own image's): %s", countIn(kgStarts), rb.Reason)
	}
}

// TestLauncher_RetriedTrialNeverMovesToADamagedBinary: the machine
// restarted during launcher 9.9.9's trial (a power loss, the moment files
// get damaged), and known-good 9.9.9's binary no longer matches its
// digest. The launcher does not run it as the host (it runs its own image
// instead), yet retryLauncher re-executed the launcher itself as that
// binary: moveTo checks no digest. The launcher's own image is
// known-good now, so the retry (of another release) is dropped.
func TestLauncher_RetriedTrialNeverMovesToADamagedBinary(t *testing.T) {
	dir := t.TempDir()
	rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	dg := script(t, rel, "exec sleep 600\n")
	// Changed on disk, and still answers as a launcher that adopts.
	script(t, rel, `if [ "$1" = version ]; then echo '`+LauncherHandover+`'; exit 0; fi
echo damaged; exec sleep 600
`)
	own := filepath.Join(dir, "own")
	script(t, own, `touch `+dir+`/own-ran; exec sleep 600
`)
	if err := EnsureStablePath(dir, filepath.Join(dir, "1.0.0")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	moved := ""
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)},
		st: launcherState{KnownGood: "9.9.9", KnownGoodPath: rel, KnownGoodDigest: dg, Launcher: "1.0.0",
			LauncherRetry: &launcherTrial{Version: "9.9.9", Path: rel, Digest: dg, From: "1.0.0", FromPath: filepath.Join(dir, "1.0.0"), Boot: "boot-1"}},
		exits: map[int]chan syscall.WaitStatus{}, firstWait: 10 * time.Millisecond, own: own}
	l.exec = func(path string, _, _ []string) error {
		mu.Lock()
		moved = path
		mu.Unlock()
		return syscall.ENOSYS
	}
	stop := runLoop(t, l)
	testwait.For(t, 20*time.Second, "the launcher's own binary running as the host", func() bool {
		_, err := os.Stat(filepath.Join(dir, "own-ran"))
		return err == nil
	})
	stop() // the retry runs in the loop before it waits on the host
	mu.Lock()
	defer mu.Unlock()
	if moved == rel {
		t.Fatalf("the launcher re-executed itself as %s, a binary that does not match its digest %s", rel, dg)
	}
}

// TestLauncher_RefetchedKnownGoodFailingGoesBackToTheOwn:
// known-good 9.9.9's binary is damaged, so the launcher's own image runs
// in its place and fetches 9.9.9 again (staged over the damaged file),
// whose trial then fails (say the controller was out of reach until its
// deadline). rollBack puts back "known-good", which is 9.9.9 itself: the
// record said 9.9.9 rolled back to 9.9.9, and the launcher started the
// binary it had just rolled back as the known-good host. The launcher's
// own image is known-good since 9.9.9's binary could not be run, so the
// failed trial goes back to it.
func TestLauncher_RefetchedKnownGoodFailingGoesBackToTheOwn(t *testing.T) {
	dir := t.TempDir()
	rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	dg := script(t, rel, `if [ "$1" = version ]; then exit 1; fi
if [ -n "$`+EnvTrialVersion+`" ]; then exit 1; fi
touch `+dir+`/kg-ran; exec sleep 600
`)
	backup := filepath.Join(dir, "backup")
	b, err := os.ReadFile(rel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(backup, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rel, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil { // damaged
		t.Fatal(err)
	}
	// The launcher's own image: fetches 9.9.9 again once and hands over.
	own := filepath.Join(dir, "own")
	script(t, own, `if [ ! -e `+dir+`/staged ]; then touch `+dir+`/staged
cp `+backup+` `+rel+`.tmp && mv `+rel+`.tmp `+rel+`
printf '{"version":"9.9.9","digest":"`+dg+`","path":"`+rel+`"}' > `+pendingPath(dir)+`; exit 3; fi
touch `+dir+`/own-ran; exec sleep 600
`)
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)},
		st:    launcherState{KnownGood: "9.9.9", KnownGoodPath: rel, KnownGoodDigest: dg, Launcher: "9.9.9"},
		exits: map[int]chan syscall.WaitStatus{}, firstWait: 10 * time.Millisecond, look: 10 * time.Millisecond, own: own}
	l.probe = func(string) error { return os.ErrPermission }
	runLoop(t, l)
	testwait.For(t, 20*time.Second, "a host running after the failed trial", func() bool {
		_, e1 := os.Stat(filepath.Join(dir, "kg-ran"))
		_, e2 := os.Stat(filepath.Join(dir, "own-ran"))
		return e1 == nil || e2 == nil
	})
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err == nil && rb.From == rb.To {
		_, ran := os.Stat(filepath.Join(dir, "kg-ran"))
		t.Fatalf("9.9.9 rolled back to itself (%+v); its binary started as known-good: %v", rb, ran == nil)
	}
}

// TestRollback_AlsoRefused: a rollback record that carries the one before
// it (a crash rollback that took an unreported record's place) refuses
// both releases on the host it reaches.
func TestRollback_AlsoRefused(t *testing.T) {
	b, _ := json.Marshal(rollback{From: "2.0.0", To: "1.0.0", Digest: "sha256:2", Also: []string{"sha256:3"},
		Reason: "it was kept after its trial, then its host exited 5 times in a row; before that, rolled back from 3.0.0 to 2.0.0: it exited"})
	t.Setenv(EnvRollback, string(b))
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	a.id = &Identity{}
	a.reportRollback(context.Background())
	if got := srv.reports(); len(got) != 1 || !strings.Contains(got[0].Reason, "rolled back from 2.0.0 to 1.0.0") || !strings.Contains(got[0].Reason, "3.0.0") {
		t.Fatalf("reports %+v", got)
	}
	if !slices.Equal(a.state.RefusedReleases, []string{"sha256:2", "sha256:3"}) {
		t.Fatalf("refused releases %v, want both", a.state.RefusedReleases)
	}
}

// TestLauncher_DamagedKnownGoodOfTheLaunchersReleaseIsMended: the
// launcher moved to known-good's release, so the stable path names the
// file that no longer matches its digest. Running its own image in its
// place kept a host up, but a restart of the machine found nothing to
// start. The launcher's image is that release: it writes the file back.
func TestLauncher_DamagedKnownGoodOfTheLaunchersReleaseIsMended(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "own")
	dg := script(t, own, `touch "$0.ran"; exec sleep 600
`)
	rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rel, []byte("\x7fELF truncated"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &launcher{cfg: LaunchConfig{StateDir: dir, Log: slog.New(slog.DiscardHandler)},
		st:    launcherState{KnownGood: "9.9.9", KnownGoodPath: rel, KnownGoodDigest: dg, Launcher: "9.9.9"},
		exits: map[int]chan syscall.WaitStatus{}, own: own}
	reapCtx, stopReap := context.WithCancel(context.Background())
	defer stopReap()
	go l.reap(reapCtx)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.loop(ctx, nil) }()
	testwait.For(t, 10*time.Second, "known-good started from its own path", func() bool {
		_, err := os.Stat(rel + ".ran")
		return err == nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ok, _ := fileHasDigest(rel, dg); !ok {
		t.Fatal("known-good's binary was not put back")
	}
	if l.st.KnownGood != "9.9.9" || l.st.KnownGoodPath != rel {
		t.Fatalf("known-good is %s at %s, want 9.9.9 at its own path", l.st.KnownGood, l.st.KnownGoodPath)
	}
}

// TestRollback_ReportedButNotSavedIsKeptAsReported: the host sent the
// rolled_back report but could not save its state (the refusal of the
// release). The record stayed as rollback.json, which the launcher takes
// for a rollback no host has reported (it may withdraw one). It is now
// kept as rollback.reported.json: the next start refuses the release
// again without a second report, and then removes it.
func TestRollback_ReportedButNotSavedIsKeptAsReported(t *testing.T) {
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	a.id = &Identity{}
	dir := a.cfg.StateDir
	if err := writeJSONAtomic(rollbackPath(dir), rollback{From: "9.9.9", To: "1.0.0", Digest: "sha256:9", Reason: "x"}, 0o600); err != nil {
		t.Fatal(err)
	}
	// The state file cannot be written: a directory in its place.
	if err := os.Mkdir(statePath(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	a.reportRollback(context.Background())
	if got := srv.reports(); len(got) != 1 || got[0].Outcome != "rolled_back" {
		t.Fatalf("reports %+v", got)
	}
	if _, err := os.Stat(rollbackPath(dir)); err == nil {
		t.Fatal("a rollback reported is left as rollback.json, which the launcher takes for unreported")
	}
	if _, err := os.Stat(reportedRollbackPath(dir)); err != nil {
		t.Fatalf("the reported record, whose refusal is not saved, is gone: %v", err)
	}
	// The next start: the state saves now.
	if err := os.Remove(statePath(dir)); err != nil {
		t.Fatal(err)
	}
	next := agentReportingTo(t, srv)
	next.id, next.cfg.StateDir = &Identity{}, dir
	next.reportRollback(context.Background())
	if got := srv.reports(); len(got) != 1 {
		t.Fatalf("the rollback was reported again: %+v", got)
	}
	if !slices.Contains(next.state.RefusedReleases, "sha256:9") {
		t.Fatalf("refused releases %v", next.state.RefusedReleases)
	}
	if _, err := os.Stat(reportedRollbackPath(dir)); err == nil {
		t.Fatal("the reported record stays after its refusal was saved")
	}
}

// TestLauncher_FollowsTheHostBackOnACrashRollback: the launcher had moved
// to the kept release, whose host then crash-looped and was rolled back.
// The launcher stayed on the failed release: the stable path named it,
// and its own image, which stands in for a damaged known-good, was a
// release known to fail. It now moves to the release put back, as it
// moved to the one kept (a launcher trial of its own).
func TestLauncher_FollowsTheHostBackOnACrashRollback(t *testing.T) {
	dir := t.TempDir()
	rel := filepath.Join(dir, "versions", version.Version, "mesh-host")
	if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
		t.Fatal(err)
	}
	dg := script(t, rel, "exit 1\n")
	prev := filepath.Join(dir, "versions", "1.0.0", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(prev), 0o700); err != nil {
		t.Fatal(err)
	}
	pdg := script(t, prev, "exec sleep 600\n")
	if err := EnsureStablePath(dir, rel); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	moved := ""
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}, self: rel,
		st: launcherState{KnownGood: version.Version, KnownGoodPath: rel, KnownGoodDigest: dg, Launcher: version.Version,
			Previous: &keptRelease{Version: "1.0.0", Path: prev, Digest: pdg}},
		exits: map[int]chan syscall.WaitStatus{}, firstWait: 10 * time.Millisecond}
	l.probe = func(string) error { return nil }
	l.exec = func(path string, _, _ []string) error {
		mu.Lock()
		moved = path
		mu.Unlock()
		return syscall.ENOSYS
	}
	runLoop(t, l)
	testwait.For(t, 20*time.Second, "the launcher moving to 1.0.0", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return moved != ""
	})
	mu.Lock()
	defer mu.Unlock()
	if moved != prev {
		t.Fatalf("the launcher moved to %q, want the release put back %s", moved, prev)
	}
}
