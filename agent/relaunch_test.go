package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/testwait"
	"mesh/version"
)

// The helper launcher: this test binary run as `mesh-host launch` would be
// (TestLauncherHelper, with MESH_TEST_LAUNCHER_STATE set), so a launcher
// that re-executes itself does so in a process of its own.
const envHelperState = "MESH_TEST_LAUNCHER_STATE"

func TestLauncherHelper(t *testing.T) {
	dir := os.Getenv(envHelperState)
	if dir == "" {
		return // only as the helper process
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := Launch(ctx, LaunchConfig{StateDir: dir, TrialDeadline: 20 * time.Second, Args: []string{"launch"}, Log: log})
	if err != nil {
		log.Error("launch", "err", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func script(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestLauncher_NewLauncherFailsToStart_StablePathStays: a host release wins
// its trial and the launcher moves to it, but that release's launcher
// fails its start. Exec refused (a binary that is no executable): the
// launcher carries on as it was. Exec done, then the new launcher dies: the
// service manager starts the stable path again, which still names the
// previous launcher; that one records the failed trial, stops the host the
// dead launcher left behind, and runs the known-good host itself.
func TestLauncher_NewLauncherFailsToStart_StablePathStays(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ExecRefused", func(t *testing.T) {
		dir := t.TempDir()
		if err := EnsureStablePath(dir, self); err != nil {
			t.Fatal(err)
		}
		bad := filepath.Join(dir, "mesh-host-9")
		if err := os.WriteFile(bad, []byte("\x7fELF truncated"), 0o755); err != nil {
			t.Fatal(err)
		}
		l := &launcher{cfg: LaunchConfig{StateDir: dir, Args: []string{"launch"}, Log: slog.New(slog.DiscardHandler)}, self: self,
			st: launcherState{KnownGood: "9.9.9", KnownGoodPath: bad, Launcher: "1.0.0"}}
		// The probe is told yes (a truncated binary would fail it); the
		// real exec then fails, so this test process is not replaced.
		l.probe = func(string) error { return nil }
		l.moveTo(context.Background(), pending{Version: "9.9.9", Digest: "sha256:bad", Path: bad}, os.Getpid())
		if got := stableTarget(dir); got != self {
			t.Fatalf("the stable path names %q", got)
		}
		var st launcherState
		if err := readJSON(launcherPath(dir), &st); err != nil {
			t.Fatal(err)
		}
		if st.LauncherTrial != nil || !strings.Contains(st.LauncherFailure, "launcher 9.9.9 could not start") ||
			!slices.Contains(st.LauncherRefused, "sha256:bad") {
			t.Fatalf("launcher.json: %+v", st)
		}
		if js, _ := ReadJournal(dir); len(js) != 1 || !strings.Contains(js[0].Reason, "launcher 9.9.9 refused") {
			t.Fatalf("the failed launcher trial is not on the host's record: %+v", js)
		}
		// Refused from then on: no second attempt.
		l.exec = func(string, []string, []string) error { t.Fatal("moved to a refused launcher"); return nil }
		l.moveTo(context.Background(), pending{Version: "9.9.9", Digest: "sha256:bad", Path: bad}, os.Getpid())
	})

	t.Run("ReleasePredatesHandover", func(t *testing.T) {
		dir := t.TempDir()
		if err := EnsureStablePath(dir, self); err != nil {
			t.Fatal(err)
		}
		// As a binary from before the hand-over answers: an unknown flag.
		old := filepath.Join(dir, "mesh-host-0")
		script(t, old, "echo 'mesh-host: unknown flag: --launcher-handover' >&2; exit 2\n")
		l := &launcher{cfg: LaunchConfig{StateDir: dir, Args: []string{"launch"}, Log: slog.New(slog.DiscardHandler)}, self: self,
			st: launcherState{KnownGood: "0.9.0", KnownGoodPath: old, Launcher: "1.0.0"}, exits: map[int]chan syscall.WaitStatus{}}
		// The probe's exit comes through the reaper, as in a launcher.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go l.reap(ctx)
		l.exec = func(string, []string, []string) error {
			t.Fatal("moved to a launcher that cannot adopt the host")
			return nil
		}
		l.moveTo(context.Background(), pending{Version: "0.9.0", Digest: "sha256:old", Path: old}, os.Getpid())
		if got := stableTarget(dir); got != self {
			t.Fatalf("the stable path names %q", got)
		}
	})

	t.Run("NewLauncherDies", func(t *testing.T) {
		dir := t.TempDir()
		if err := EnsureStablePath(dir, self); err != nil {
			t.Fatal(err)
		}
		// Host 1.0.0 hands over to 9.9.9 once. The 9.9.9 binary runs as a
		// host (it completes its trial at once and stays up) but dies as a
		// launcher.
		rel := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
		if err := os.MkdirAll(filepath.Dir(rel), 0o700); err != nil {
			t.Fatal(err)
		}
		digest := script(t, rel, `case "$1" in
version) echo "`+LauncherHandover+`" ;;
run) echo 9.9.9 > "$`+envHelperState+`/reconciled-$MESH_TRIAL_VERSION"; exec sleep 600 ;;
*) echo "the new launcher dies" >&2; exit 1 ;;
esac
`)
		old := filepath.Join(dir, "mesh-host-1")
		script(t, old, `if [ ! -e "$`+envHelperState+`/handed" ]; then
  touch "$`+envHelperState+`/handed"
  printf '{"version":"9.9.9","digest":"%s","path":"%s"}' '`+digest+`' '`+rel+`' > "$`+envHelperState+`/launch.json"
  exit 3
fi
exec sleep 600
`)
		if err := writeJSONAtomic(launcherPath(dir), launcherState{KnownGood: "1.0.0", KnownGoodPath: old}, 0o600); err != nil {
			t.Fatal(err)
		}
		// The service manager starts the stable path.
		// Output goes to a file: a pipe would stay open as long as the
		// host the dead launcher left runs.
		start := func() (*exec.Cmd, *logFile) {
			cmd := exec.Command(StablePath(dir), "-test.run=^TestLauncherHelper$")
			cmd.Env = append(os.Environ(), envHelperState+"="+dir)
			f, err := os.CreateTemp(dir, "launcher-*.log")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd.Stdout, cmd.Stderr = f, f
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return cmd, &logFile{f.Name()}
		}
		first, out := start()
		err := first.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out.String(), "the new launcher dies") {
			t.Fatalf("the launcher process: %v\n%s", err, out)
		}
		if got := stableTarget(dir); got != self {
			t.Fatalf("the stable path names %q after the new launcher died", got)
		}
		var st launcherState
		if err := readJSON(launcherPath(dir), &st); err != nil {
			t.Fatal(err)
		}
		if st.LauncherTrial == nil || st.LauncherTrial.Version != "9.9.9" || st.KnownGood != "9.9.9" || st.HostPID == 0 {
			t.Fatalf("launcher.json when the new launcher died: %+v", st)
		}
		stray := pidRecord{PID: st.HostPID, StartTime: st.HostStart}
		if !alive(stray) {
			t.Fatal("the host the dead launcher ran is not running")
		}
		t.Cleanup(func() { _ = syscall.Kill(stray.PID, syscall.SIGKILL) })

		// The service manager restarts the stable path: the previous launcher.
		second, out2 := start()
		t.Cleanup(func() {
			_ = second.Process.Signal(syscall.SIGTERM)
			_ = second.Wait()
			if t.Failed() {
				t.Logf("the restarted launcher:\n%s", out2)
			}
		})
		testwait.For(t, 20*time.Second, "the restarted launcher running known-good", func() bool {
			var st launcherState
			return readJSON(launcherPath(dir), &st) == nil && st.HostPID != stray.PID && st.HostPID > 0 && parentOf(st.HostPID) == second.Process.Pid
		})
		if alive(stray) {
			t.Fatal("the host the dead launcher left still runs beside the new one")
		}
		st = launcherState{}
		if err := readJSON(launcherPath(dir), &st); err != nil {
			t.Fatal(err)
		}
		if st.LauncherTrial != nil || !strings.Contains(st.LauncherFailure, "launcher 9.9.9 did not complete its trial") ||
			!slices.Contains(st.LauncherRefused, digest) || st.Launcher != "dev" {
			t.Fatalf("launcher.json after the restart: %+v", st)
		}
		if got := stableTarget(dir); got != self {
			t.Fatalf("the stable path names %q", got)
		}
	})
}

type logFile struct{ path string }

func (l *logFile) String() string { b, _ := os.ReadFile(l.path); return string(b) }

// TestLauncher_Trial: a launcher re-executed into a release completes its
// trial when its host leaves the marker, and the stable path is flipped to
// it; without the marker by the deadline it re-executes the launcher the
// stable path still names, handing the host back, and refuses the release's
// launcher.
func TestLauncher_Trial(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	newLauncher := func(t *testing.T) (*launcher, string) {
		dir := t.TempDir()
		if err := EnsureStablePath(dir, "/old/mesh-host"); err != nil {
			t.Fatal(err)
		}
		l := &launcher{cfg: LaunchConfig{StateDir: dir, Args: []string{"launch", "--state", dir}, TrialDeadline: 2 * time.Second,
			Log: slog.New(slog.DiscardHandler)}, self: self,
			st: launcherState{KnownGood: version.Version, KnownGoodPath: self, Launcher: version.Version, HostPID: 4242,
				LauncherTrial: &launcherTrial{Version: version.Version, Path: self, Digest: "sha256:new", From: "1.0.0", FromPath: "/old/mesh-host"}}}
		return l, dir
	}

	t.Run("Completes", func(t *testing.T) {
		l, dir := newLauncher(t)
		l.exec = func(string, []string, []string) error { t.Fatal("went back"); return nil }
		if err := os.WriteFile(launcherMarkerPath(dir, version.Version), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		l.launcherTrial(context.Background())
		var st launcherState
		if err := readJSON(launcherPath(dir), &st); err != nil {
			t.Fatal(err)
		}
		if got := stableTarget(dir); got != self || st.LauncherTrial != nil {
			t.Fatalf("stable path %q, launcher.json %+v", got, st)
		}
	})

	t.Run("MissesItsDeadline", func(t *testing.T) {
		l, dir := newLauncher(t)
		var path string
		var argv, env []string
		l.exec = func(p string, a, e []string) error { path, argv, env = p, a, e; return nil }
		l.launcherTrial(context.Background())
		if path != "/old/mesh-host" || strings.Join(argv, " ") != "/old/mesh-host launch --state "+dir || !slices.Contains(env, EnvLauncherHost+"=4242") {
			t.Fatalf("went back with %s %q (host in env: %v)", path, argv, slices.Contains(env, EnvLauncherHost+"=4242"))
		}
		var st launcherState
		if err := readJSON(launcherPath(dir), &st); err != nil {
			t.Fatal(err)
		}
		if got := stableTarget(dir); got != "/old/mesh-host" || st.LauncherTrial != nil ||
			!strings.Contains(st.LauncherFailure, "did not complete its trial within 2s") || !slices.Contains(st.LauncherRefused, "sha256:new") {
			t.Fatalf("stable path %q, launcher.json %+v", got, st)
		}
	})
}

// TestLauncher_StoppingDoesNotMove: a launcher told to stop (its context
// ended by SIGTERM) while its host wins a trial does not re-execute: the new
// image would not know it had been told and would run on, its service
// manager waiting. Told before the move, or while probing the release, it
// stays as it is with no launcher trial recorded and nothing refused.
func TestLauncher_StoppingDoesNotMove(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"before", "while probing"} {
		t.Run(when, func(t *testing.T) {
			dir := t.TempDir()
			if err := EnsureStablePath(dir, self); err != nil {
				t.Fatal(err)
			}
			l := &launcher{cfg: LaunchConfig{StateDir: dir, Args: []string{"launch"}, Log: slog.New(slog.DiscardHandler)}, self: self,
				st: launcherState{KnownGood: "9.9.9", KnownGoodPath: self, Launcher: "1.0.0"}}
			ctx, cancel := context.WithCancel(context.Background())
			if when == "before" {
				cancel()
			}
			l.probe = func(string) error { cancel(); return nil }
			l.exec = func(string, []string, []string) error { t.Fatal("re-executed while stopping"); return nil }
			l.moveTo(ctx, pending{Version: "9.9.9", Digest: "sha256:new", Path: self}, os.Getpid())
			var st launcherState
			if err := readJSON(launcherPath(dir), &st); err != nil && when != "before" {
				t.Fatal(err)
			}
			if st.LauncherTrial != nil || st.LauncherFailure != "" || len(st.LauncherRefused) > 0 {
				t.Fatalf("launcher.json: %+v", st)
			}
			if got := stableTarget(dir); got != self {
				t.Fatalf("the stable path names %q", got)
			}
		})
	}
}
