package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// on_renew's signal goes to a service's main process under the host's own
// supervisor (syscall.Kill of its pid). Under --services systemd the host
// runs `systemctl kill --signal=SIGHUP UNIT`, whose --kill-whom defaults to
// "all": every process of the unit's control group gets SIGHUP — workers,
// helpers and children a wrapper started, most of which SIGHUP terminates
// (its default action). The renewal must signal the main process only.
func TestSystemd_ARenewalSignalsOnlyTheMainProcess(t *testing.T) {
	root, err := openMachineRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	stand := filepath.Join(t.TempDir(), "systemctl")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\necho \"$*\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSystemd(root)
	s.systemctl = stand
	if err := s.Renewed(context.Background(), "web.service", "HUP"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(calls)
	if !strings.Contains(string(got), "kill") || !strings.Contains(string(got), "--kill-who=main") {
		t.Fatalf("the renewal's SIGHUP goes to every process of the unit, not its main process as under the host's supervisor: systemctl %q", got)
	}
}
