package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mesh/models"
	"mesh/store"
)

// TestHealth_AFullStateDirIsUnhealthy, with a real host whose state dir is
// a small tmpfs: filled, the host can save neither its state nor its
// journal, and its reports wait in memory, lost if it restarts, while it
// runs nothing that fails a check: the machine read current and healthy.
// The host's own check now fails, saying why; the machine turns unhealthy
// after the grace, and is current again once the space is back.
func TestHealth_AFullStateDirIsUnhealthy(t *testing.T) {
	c := startController(t, store.SQLite, "--unhealthy-after", "2s")
	small := filepath.Join(t.TempDir(), "small")
	if err := os.MkdirAll(small, 0o700); err != nil {
		t.Fatal(err)
	}
	// Root runs the tests (as a host runs): a tmpfs of 8 MiB is the
	// full disk. Unmounted after the host has stopped (cleanups run last
	// first, and the host's is registered at its enrolment, below).
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=8m,mode=0700"); err != nil {
		t.Fatalf("mounting a tmpfs for the host's state dir (the test runs as root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(small, unix.MNT_DETACH) })
	h := enroll(t, c, "m1", c.URL)
	if out, err := exec.Command("cp", "-a", h.State+"/.", small).CombinedOutput(); err != nil {
		t.Fatalf("copying the enrolled state dir: %v\n%s", err, out)
	}
	h.State = small
	h.start("--check-every", "1s")
	c.waitApplied("m1", 60*time.Second)
	if m := c.machine("m1"); m.State != "current" || m.Health.State == models.HealthFailing {
		t.Fatalf("before the state dir fills: state %s, health %+v", m.State, m.Health)
	}

	filler := filepath.Join(small, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	for {
		if _, err = f.Write(block); err != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the state dir: %v", err)
	}
	var m machineView
	waitFor(t, 30*time.Second, "m1 unhealthy, its host's own check failing", func() bool {
		m = c.machine("m1")
		return m.State == "unhealthy" && m.Health.Check == models.HostStateCheck
	})
	if m.Health.State != models.HealthFailing || !strings.Contains(m.Health.Detail, "no space left on device") ||
		!strings.Contains(m.Health.Detail, "takes no writes") {
		t.Fatalf("m1's health with its state dir full: %+v", m.Health)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "m1 current again, its state dir taking writes", func() bool {
		m = c.machine("m1")
		return m.State == "current" && m.Health.State != models.HealthFailing
	})
}
