package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mesh/models"
	"mesh/testwait"
)

// TestCrashLoop_RestartsKeptWhenTheHostRestartsInTheBackoff: a service
// crash-loops under the host's supervisor; its restarts ride in its
// pidfile. The host is restarted (an upgrade, a crash of the host) while
// the service is down, waiting out its restart backoff (up to 30 s, so
// most of a crash loop's time). The next host found the pidfile's process
// dead, started the service afresh, and forgot the restarts the pidfile
// carried: the service read passing at once. A service down that was
// restarted and not settled is started again as one restart more.
func TestCrashLoop_RestartsKeptWhenTheHostRestartsInTheBackoff(t *testing.T) {
	// It exits at its first two starts, then stays up (a crash loop the
	// next host happens to catch in a run that lasts).
	r, _, host := scriptedService(t, "[ $(wc -l < \"$STARTS\") -ge 3 ] && exec sleep 60\nexit 1\n")
	ctx := context.Background()
	first := host()
	if _, err := first.Ensure(ctx, r, "sha256:1"); err != nil {
		t.Fatal(err)
	}
	// Restarted once and exited again: down, in its 2 s backoff.
	testwait.For(t, 20*time.Second, "the service down after its first restart", func() bool {
		h := first.health(r.ID)
		return h.failing && h.up == 0 && strings.Contains(h.detail, "restarted 1 time")
	})
	var rec pidRecord
	if err := readJSON(first.pidPath(r.ID), &rec); err != nil || rec.Restarts != 1 {
		t.Fatalf("the pidfile does not carry the restart: %+v %v", rec, err)
	}
	// The host stops now (its services run on; this one is down).
	first.Close()
	next := host()
	t.Cleanup(func() { _ = next.Stop(ctx, r.ID); next.Close() })
	if _, err := next.Ensure(ctx, r, "sha256:1"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the service up past upMoment under the next host", func() bool {
		return next.health(r.ID).up >= upMoment
	})
	if h := next.health(r.ID); !h.failing {
		t.Fatalf("a service that exited twice and was restarted (the last exit seen by no host) reads passing after the host's restart: %+v", h)
	}
}

// TestLauncher_CrashRollbackWithdrawnWhenThePutBackCrashLoopsToo: 9.9.9
// wins its trial and is kept; then the machine breaks in a way no release
// survives (the host's state file turned unreadable, its identity lost):
// every host exits at once. The launcher rolls 9.9.9 back to 1.0.0 after
// five exits, and 1.0.0 then exits at every start just the same — proof
// that the crash loop was the machine's, not 9.9.9's. The record blaming
// 9.9.9 stood all the same: once the machine was mended, 1.0.0 reported
// the rollback, refused 9.9.9, and the controller failed the release for
// the whole fleet over one machine's broken disk. The rollback is now
// withdrawn while unreported, and 9.9.9 is known-good again.
func TestLauncher_CrashRollbackWithdrawnWhenThePutBackCrashLoopsToo(t *testing.T) {
	dir, _ := keptLauncher(t, func(dir, _ string) string {
		return `echo x >> ` + dir + `/back-starts; exit 1
`
	}, trialThenCrash)
	testwait.For(t, 25*time.Second, "1.0.0 put back, exiting five times, and 9.9.9 started again", func() bool {
		return countIn(filepath.Join(dir, "back-starts")) >= crashLoopExits && countIn(filepath.Join(dir, "starts")) >= 1+crashLoopExits+1
	})
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err == nil {
		t.Fatalf("the release put back crash-loops as 9.9.9 did, yet the record blaming 9.9.9 stands (reported, 9.9.9 is refused and failed fleet-wide): %+v", rb)
	}
	var st launcherState
	if err := readJSON(launcherPath(dir), &st); err != nil || st.KnownGood != "9.9.9" || st.Previous == nil || st.Previous.Version != "1.0.0" {
		t.Fatalf("launcher.json after the withdrawal: %+v %v, want 9.9.9 known-good, 1.0.0 still the release before it", st, err)
	}
}

// TestLauncher_AfterAWithdrawalAMendedMachineStillRollsBack: the crash
// rollback of 9.9.9 was withdrawn (1.0.0 crash-looped too: the machine
// was broken). The machine is then mended, and 9.9.9 still exits at
// every start: it was the release's doing after all. The withdrawal
// forgot 1.0.0, so 9.9.9 was started again for good with no host
// running; 1.0.0 stays the release to go back to, and is.
func TestLauncher_AfterAWithdrawalAMendedMachineStillRollsBack(t *testing.T) {
	var broken string
	dir, dg := keptLauncher(t, func(dir, _ string) string {
		broken = filepath.Join(dir, "broken")
		if err := os.WriteFile(broken, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return `echo x >> ` + dir + `/back-starts; [ -e ` + broken + ` ] && exit 1; touch ` + dir + `/back; exec sleep 600
`
	}, trialThenCrash)
	testwait.For(t, 25*time.Second, "the crash rollback withdrawn, 9.9.9 started again", func() bool {
		return countIn(filepath.Join(dir, "back-starts")) >= crashLoopExits && countIn(filepath.Join(dir, "starts")) >= 1+crashLoopExits+1
	})
	// Mended.
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "1.0.0 running after 9.9.9 crash-looped again", func() bool {
		_, err := os.Stat(filepath.Join(dir, "back"))
		return err == nil
	})
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err != nil || rb.From != "9.9.9" || rb.To != "1.0.0" || rb.Digest != dg {
		t.Fatalf("rollback %+v (%v), want 9.9.9 to 1.0.0", rb, err)
	}
}

// TestSystemd_CountBackToItsSettledValueStillFails: under
// --services systemd, a unit settled once with NRestarts=3 (an old crash
// loop). A restart by hand (Renewed's `systemctl restart` at a
// certificate renewal, an operator) resets NRestarts to 0; the unit then
// crash-loops again, and by the next look systemd has restarted it three
// times: NRestarts=3, up 2 s. health compared the count with the one it
// settled at by equality, and read the crash-looping unit passing; the
// main process's start, another than the settled one's, now tells.
func TestSystemd_CountBackToItsSettledValueStillFails(t *testing.T) {
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
	say := func(restarts int, upFor time.Duration) {
		t.Helper()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		b := fmt.Sprintf("ActiveState=active\nSubState=running\nNRestarts=%d\nExecMainStartTimestampMonotonic=%d\nExecMainCode=0\nExecMainStatus=0\n",
			restarts, (ts.Nano()-upFor.Nanoseconds())/1000)
		if err := os.WriteFile(props, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	say(3, 40*time.Second)
	if h := s.health("web.service"); h.failing {
		t.Fatalf("a unit up 40 s: %+v", h)
	}
	// Restarted by hand since (NRestarts back to 0), then restarted by
	// systemd three times; up 2 s now.
	say(3, 2*time.Second)
	if h := s.health("web.service"); !h.failing {
		t.Fatalf("a unit systemd restarted 3 times since a restart by hand, up 2 s, reads passing: %+v", h)
	}
}

// TestCrashLoop_AdoptedIsUpSinceItsProcessStarted: a host of this
// release restarts a service once and writes restarts=1 into its pidfile.
// The host is then replaced before the settle by one that does not
// rewrite pidfiles (the release before this one: a rollback, a crash
// rollback; it adopts the process and keeps the file as it is). The
// service runs on, well past the settle. The next host of this release
// adopted restarts=1 and read the service failing ("restarted 1 time
// since <weeks ago>") for a settle from its adoption, though the
// process's own start time (in the same pidfile) shows it has stayed up
// far longer than that since the restart. An adopted process is up since
// it started.
func TestCrashLoop_AdoptedIsUpSinceItsProcessStarted(t *testing.T) {
	// It exits at its first start; its second runs on (saying when it
	// has run 2 s in one go).
	r, state, host := scriptedService(t, "[ $(wc -l < \"$STARTS\") -ge 2 ] || exit 1\nsleep 2; touch \"$(dirname \"$STARTS\")/up2\"\nexec sleep 60\n")
	up := filepath.Join(state, "up2")
	ctx := context.Background()
	first := host()
	if _, err := first.Ensure(ctx, r, "sha256:1"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "the pidfile saying the restart", func() bool {
		var rec pidRecord
		return readJSON(first.pidPath(r.ID), &rec) == nil && rec.Restarts == 1
	})
	// Replaced by a host that leaves the pidfile as it is; the service
	// stays up past the settle meanwhile.
	first.Close()
	testwait.For(t, 20*time.Second, "the service up 2 s in one go", func() bool {
		_, err := os.Stat(up)
		return err == nil
	})
	next := host()
	next.settle = time.Second
	t.Cleanup(func() { _ = next.Stop(ctx, r.ID); next.Close() })
	if got, err := next.Ensure(ctx, r, "sha256:1"); err != nil || got != "unchanged" {
		t.Fatalf("the service was not adopted: %q %v", got, err)
	}
	if h := next.health(r.ID); h.failing {
		t.Fatalf("a service up 2 s in one go since its restart (settle 1 s) reads failing after adoption: %+v", h)
	}
}

// scriptedService is a service web.service whose command is the shell
// script body (its starts counted in <state>/starts, $STARTS to the body), under a machine root and a host state dir of their own; host
// makes a supervisor of that state dir, as each run of the host does. The
// service runs under the first host started.
func scriptedService(t *testing.T, body string) (r models.Resource, state string, host func() *supervisor) {
	t.Helper()
	rootDir := t.TempDir()
	state = t.TempDir()
	root, err := openMachineRoot(rootDir)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(rootDir, "opt", "run")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	starts := filepath.Join(state, "starts")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nSTARTS="+starts+"\necho x >> \"$STARTS\"\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	host = func() *supervisor {
		t.Helper()
		sup, err := newSupervisor(state, root, slog.New(slog.DiscardHandler), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return sup
	}
	return models.Resource{ID: "web.service", Kind: "service", Command: []string{"/opt/run"}}, state, host
}
