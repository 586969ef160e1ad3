package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestShippedUnits_Verify: the systemd units that ship in dist/systemd
// (and in the .deb/.rpm) pass systemd-analyze verify, pointed at the
// binaries built for this test.
func TestShippedUnits_Verify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("MESH_TEST_REQUIRE_SYSTEMD") != "" {
			t.Fatal("systemd-analyze is required (MESH_TEST_REQUIRE_SYSTEMD) but missing")
		}
		t.Skip("systemd-analyze not installed")
	}
	dir := t.TempDir()
	for name, must := range map[string][]string{
		// The launcher, and only it is stopped: services outlive a restart.
		// It is started by the stable path the launcher flips.
		"mesh-host": {"ExecStart=/var/lib/mesh-host/bin/mesh-host launch", "KillMode=process", "StateDirectory=mesh-host"},
		// Its own user, its data dir, the system read-only to it.
		"mesh-controller": {"User=mesh-controller", "StateDirectory=mesh-controller", "ProtectSystem=strict", "NoNewPrivileges=yes"},
	} {
		b, err := os.ReadFile("../dist/systemd/" + name + ".service")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range must {
			if !strings.Contains(string(b), m) {
				t.Errorf("%s.service lacks %s", name, m)
			}
		}
		unit := strings.ReplaceAll(strings.ReplaceAll(string(b), "/usr/bin/"+name, filepath.Join(bin, name)),
			"/var/lib/mesh-host/bin/mesh-host", filepath.Join(bin, name))
		if err := os.WriteFile(filepath.Join(dir, name+".service"), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	units, _ := filepath.Glob(filepath.Join(dir, "*.service"))
	if out, err := exec.Command(analyze, append([]string{"verify"}, units...)...).CombinedOutput(); err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
