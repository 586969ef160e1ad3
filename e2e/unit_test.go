package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestShippedUnit_Verifies: the systemd unit for `mesh-host launch` that
// ships in dist/ passes systemd-analyze verify.
func TestShippedUnit_Verifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("MESH_TEST_REQUIRE_SYSTEMD") != "" {
			t.Fatal("systemd-analyze is required (MESH_TEST_REQUIRE_SYSTEMD) but missing")
		}
		t.Skip("systemd-analyze not installed")
	}
	b, err := os.ReadFile("../dist/mesh-host.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "mesh-host launch") || !strings.Contains(string(b), "KillMode=process") {
		t.Fatal("the unit does not run the launcher, or would kill the services with it")
	}
	// The same unit, pointing at the binary built for this test.
	unit := filepath.Join(t.TempDir(), "mesh-host.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/mesh-host", filepath.Join(bin, "mesh-host"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", unit).CombinedOutput(); err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
