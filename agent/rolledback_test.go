package agent

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mesh/testwait"
)

// TestLauncher_CrashRollbackReportedIsNotWithdrawn: 9.9.9 is kept and
// then crash-loops; the launcher rolls it back to 1.0.0. 1.0.0 reports
// the rollback (the controller fails 9.9.9 fleet-wide, 1.0.0 refuses it)
// and then dies at every start too (the machine's trouble). The launcher
// takes "rollback.json still there" (or "my record is still unwritten")
// for "no host has reported it", but a host that reported leaves the
// record where it was whenever it could not save its own state (the
// report sent all the same), and a record the launcher could not write is
// handed to every host in its environment, which reports it from there
// and removes nothing. In both cases, on a full state dir (the very
// trouble the withdrawal is for) the launcher withdrew a rollback the
// controller had been told of: 9.9.9 known-good and running again on a
// machine the controller recorded as rolled back from it. A host now
// renames a record it reported as rollback.reported.json, and a record in
// the environment stands.
func TestLauncher_CrashRollbackReportedIsNotWithdrawn(t *testing.T) {
	for name, c := range map[string]struct {
		prepare func(t *testing.T, dir string)
		report  func(dir string) string
	}{
		// rollback.json written; 1.0.0 reports it and cannot save its
		// state, so it keeps the record as reported (renamed), as
		// reportRollback does.
		"RecordLeftByTheReportingHost": {
			prepare: func(*testing.T, string) {},
			report: func(dir string) string {
				return `[ -e ` + rollbackPath(dir) + ` ] && { cat ` + rollbackPath(dir) + ` >> ` + dir + `/reported; echo >> ` + dir + `/reported; mv ` +
					rollbackPath(dir) + ` ` + reportedRollbackPath(dir) + `; }`
			},
		},
		// rollback.json cannot be written: the record rides MESH_ROLLBACK
		// to each 1.0.0 started, which reports it from there.
		"RecordHandedInTheEnvironment": {
			prepare: func(t *testing.T, dir string) {
				// Stands for a state dir where rollback.json cannot be
				// written (a rename over a directory fails).
				if err := os.MkdirAll(filepath.Join(rollbackPath(dir), "x"), 0o700); err != nil {
					t.Fatal(err)
				}
			},
			report: func(dir string) string {
				return `printf '%s\n' "$` + EnvRollback + `" >> ` + dir + `/reported`
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var dir string
			dir, dg := keptLauncher(t, func(d, _ string) string {
				if dir == "" {
					dir = d
				}
				c.prepare(t, d)
				return c.report(d) + `
echo x >> ` + d + `/back-starts; exit 1
`
			}, trialThenCrash)
			testwait.For(t, 25*time.Second, "1.0.0 put back and exiting past five times, or 9.9.9 started again", func() bool {
				return countIn(filepath.Join(dir, "back-starts")) >= crashLoopExits+2 ||
					countIn(filepath.Join(dir, "starts")) >= 1+crashLoopExits+1
			})
			b, _ := os.ReadFile(filepath.Join(dir, "reported"))
			if !strings.Contains(string(b), dg) {
				t.Fatalf("1.0.0 did not report the rollback of 9.9.9 (%s): %q", dg, b)
			}
			if n := countIn(filepath.Join(dir, "starts")); n > 1+crashLoopExits {
				l := launcherState{}
				_ = readJSON(launcherPath(dir), &l)
				t.Fatalf("1.0.0 reported 9.9.9's rollback %d time(s) (the controller failed 9.9.9), yet the launcher withdrew it as unreported: "+
					"9.9.9 started again (%d starts), known-good now %s", strings.Count(string(b), dg), n, l.KnownGood)
			}
		})
	}
}

// TestLauncher_MendNeverWritesOverAnInstalledBinary: known-good's binary
// was damaged, so the launcher's own binary became known-good:
// KnownGoodPath is the launcher's os.Executable path (l.self: here, as
// installed by the operator's package, /usr/bin/mesh-host), its digest that
// of the running image (/proc/<pid>/exe). The operator then upgrades the
// package: the file at that path is a newer build; the launcher runs on
// (the package does not restart it). At the host's next start the file
// "does not match its digest", the running image does, so mend wrote the
// launcher's old image over the operator's new binary: a package upgrade
// silently undone. Mend writes back only a file the host staged itself
// (versions/<v>/mesh-host).
//
// (l.own stands for /proc/<pid>/exe; launcher.json is as the own-image
// fallback leaves it in production, where KnownGoodPath is l.self, not
// the image: a test's fallback would name l.own for both.)
func TestLauncher_MendNeverWritesOverAnInstalledBinary(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "proc-self-exe")
	dg := script(t, own, `touch `+dir+`/old-ran; exec sleep 600
`)
	installed := filepath.Join(dir, "usr", "bin", "mesh-host")
	if err := os.MkdirAll(filepath.Dir(installed), 0o755); err != nil {
		t.Fatal(err)
	}
	// The package upgraded since: a newer build at the installed path.
	newer := "#!/bin/sh\ntouch " + dir + "/new-ran; exec sleep 600\n"
	if err := os.WriteFile(installed, []byte(newer), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &launcher{cfg: LaunchConfig{StateDir: dir, Log: slog.New(slog.DiscardHandler)}, self: installed,
		st:    launcherState{KnownGood: "1.0.0", KnownGoodPath: installed, KnownGoodDigest: dg, Launcher: "1.0.0"},
		exits: map[int]chan syscall.WaitStatus{}, own: own, firstWait: 10 * time.Millisecond}
	stop := runLoop(t, l)
	testwait.For(t, 10*time.Second, "a host running", func() bool {
		_, e1 := os.Stat(filepath.Join(dir, "old-ran"))
		_, e2 := os.Stat(filepath.Join(dir, "new-ran"))
		return e1 == nil || e2 == nil
	})
	stop()
	if b, _ := os.ReadFile(installed); string(b) != newer {
		t.Fatalf("the launcher wrote its own image over %s, the operator's newer binary:\n%s", installed, b)
	}
}

// TestSystemd_MainPIDChangeIsNoRestart: under --services systemd,
// a unit that crash-looped once (NRestarts=3) and has since settled. Its
// main process then changes without systemd restarting anything: a
// daemon that re-executes into a new main pid on reload (a PIDFile
// rewritten, MAINPID= from a notify service, nginx's binary upgrade).
// systemd stamps ExecMainStartTimestamp anew when the main pid changes,
// NRestarts stays 3, the invocation stays the same. health read "the same
// count, another process" as "started by hand, then restarted 3 times
// again" and failed a healthy service for 30 s, though nothing exited. A
// start by hand or a restart by systemd is a new invocation
// (InvocationID); a new main pid is not.
func TestSystemd_MainPIDChangeIsNoRestart(t *testing.T) {
	root, err := openMachineRoot(t.TempDir())
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
	say := func(restarts int, upFor time.Duration, invocation string) {
		t.Helper()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		b := fmt.Sprintf("ActiveState=active\nSubState=running\nNRestarts=%d\nExecMainStartTimestampMonotonic=%d\nExecMainCode=0\nExecMainStatus=0\nInvocationID=%s\n",
			restarts, (ts.Nano()-upFor.Nanoseconds())/1000, invocation)
		if err := os.WriteFile(props, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	say(3, 40*time.Second, "0b1c")
	if h := s.health("web.service"); h.failing {
		t.Fatalf("a unit up 40 s: %+v", h)
	}
	// Same invocation, same count: its main pid changed 2 s ago.
	say(3, 2*time.Second, "0b1c")
	if h := s.health("web.service"); h.failing {
		t.Fatalf("a unit whose main pid changed (no exit, no restart, same invocation) reads failing: %+v", h)
	}
}
