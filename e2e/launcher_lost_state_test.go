package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/store"
)

// hostsOn counts the mesh-host run processes on a state dir (zombies left
// out).
func hostsOn(state string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), "\x00run\x00") && strings.Contains(string(b), state) {
			if st, _ := os.ReadFile(filepath.Dir(p) + "/stat"); !strings.Contains(string(st), ") Z ") {
				n++
			}
		}
	}
	return n
}

// TestUpgrade_LauncherKilledDuringATrialWithItsStateLost: the launcher was
// killed -9 while release 2.0.0 was on trial (the shipped unit's
// KillMode=process leaves the trial host running), its launcher.json lost,
// and started again: knowing no host of its own, it started known-good
// 1.0.0 beside the trial host, which staged 2.0.0 and handed over again —
// two hosts polled, applied and wrote one machine's state, and the
// controller showed one. A host holds a lock on its state dir, and a
// launcher stops the host holding it that it did not start.
func TestUpgrade_LauncherKilledDuringATrialWithItsStateLost(t *testing.T) {
	c := startController(t, store.SQLite)
	h := enroll(t, c, "m1", c.URL)
	h.launch = true
	h.start("--trial-deadline", "8s")
	c.waitApplied("m1", 30*time.Second)
	c.release("mesh-host-2", "2.0.0")
	c.rollout("2.0.0")
	waitFor(t, 60*time.Second, "the launcher says the release is on trial", func() bool { return strings.Contains(h.log.String(), "release on trial") })

	// The trial host has taken its state dir's lock (a unit's restart comes
	// seconds later; a launcher started at the same instant finds the
	// stray at its next start of a host instead).
	waitFor(t, 30*time.Second, "the trial host holding the state dir", func() bool {
		b, _ := os.ReadFile(filepath.Join(h.State, "host.lock"))
		return len(b) > 0 && !strings.HasPrefix(string(b), strconv.Itoa(h.cmd.Process.Pid)+" ")
	})
	old := h.cmd
	_ = syscall.Kill(old.Process.Pid, syscall.SIGKILL)
	go func() { _ = old.Wait() }()
	_ = os.Remove(filepath.Join(h.State, "launcher.json"))
	waitFor(t, 10*time.Second, "the launcher gone", func() bool { return exitedEarly(old.Process.Pid) })
	t.Cleanup(func() { _ = syscall.Kill(-old.Process.Pid, syscall.SIGKILL) })
	h.start(h.extra...)

	if v := c.waitRollout("2.0.0", 120*time.Second, "halted", "done"); v.State != "done" {
		t.Errorf("rollout of 2.0.0: %+v", v)
	}
	waitFor(t, 60*time.Second, "m1 on 2.0.0", func() bool { return c.machine("m1").HostVersion == "2.0.0" })
	c.setVars("m1", map[string]string{"after": "yes"})
	c.waitApplied("m1", 60*time.Second)
	waitFor(t, 60*time.Second, "one host on m1's state dir", func() bool { return hostsOn(h.State) == 1 })
}
