package agent

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/testwait"
)

// A service a host adopted (started by the host before it, which a
// restart or an upgrade replaced) exited, and its log said nothing of it:
// its shipped lines showed "--- mesh-host starting" twice in a row, the
// exit only in the host's own log. Only a service this host started is its
// child, whose exit it is told of and wrote down.
func TestLogs_AnAdoptedServicesExitIsInItsLog(t *testing.T) {
	r, _, host := scriptedService(t, "exec sleep 600\n")
	// Started by another process, as a host before this one did: its
	// parent is not this test.
	sh := exec.Command("sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!")
	sh.Dir = "/"
	out, err := sh.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	sup := host()
	var st uint64
	testwait.For(t, 10*time.Second, "the service's process to run", func() bool {
		st, err = startTime(pid)
		return err == nil
	})
	if err := writeJSONAtomic(sup.pidPath(r.ID), pidRecord{PID: pid, StartTime: st, Digest: "sha256:1"}, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() { _ = sup.Stop(ctx, r.ID); sup.Close() })
	if got, err := sup.Ensure(ctx, r, "sha256:1"); err != nil || got != "unchanged" {
		t.Fatalf("the service was not adopted: %q %v", got, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "the adopted service's exit in its log", func() bool {
		b, _ := os.ReadFile(sup.LogPath(r.ID))
		return strings.Contains(string(b), "(pid "+strconv.Itoa(pid)+") exited")
	})
}
