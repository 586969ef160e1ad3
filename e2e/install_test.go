package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
)

// installLine is a new join token's install one-liner.
func (c *controllerProc) installLine() string {
	c.t.Helper()
	var jt struct {
		Install string `json:"install"`
	}
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/join-tokens", Token: c.Admin}, 201, &jt)
	if !strings.Contains(jt.Install, `--cacert "$d/mesh-ca.pem"`) || !strings.Contains(jt.Install, "/install.sh") {
		c.t.Fatalf("the join token's install line: %q", jt.Install)
	}
	return jt.Install
}

// runInstall runs the one-liner as a person pastes it into a shell, with
// more arguments appended (they reach install.sh), in dir.
func runInstall(t *testing.T, line, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line+" "+strings.Join(args, " "))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestInstall_OneLiner: the join token's install line, run as given against
// a real controller serving TLS under its mesh CA, refuses while no host
// release is published and when the pin does not name the CA; once a
// release is published it installs that release under --prefix, the
// installed unit passes systemd-analyze verify, and the launcher started as
// the unit starts it enrols-to-current: the machine becomes current.
func TestInstall_OneLiner(t *testing.T) {
	for _, tool := range []string{"curl", "openssl", "sha256sum", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	c := startControllerTLS(t, store.SQLite)
	work := t.TempDir()

	t.Run("NoReleasePublished", func(t *testing.T) {
		out, err := runInstall(t, c.installLine(), work, "--prefix", filepath.Join(work, "none"), "--name", "inst0")
		if err == nil || !strings.Contains(out, "no host release for linux/") || !strings.Contains(out, "is published") {
			t.Fatalf("err %v, output:\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(work, "none", "usr")); !os.IsNotExist(err) {
			t.Errorf("something was installed: %v", err)
		}
	})

	c.release("mesh-host", "1.0.0")
	binary, err := os.ReadFile(filepath.Join(bin, "mesh-host"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(binary)
	digest := "sha256:" + hex.EncodeToString(sum[:])

	t.Run("PinNamesAnotherCA", func(t *testing.T) {
		line := regexp.MustCompile(`--pin sha256:[0-9a-f]{64}`).ReplaceAllString(c.installLine(), "--pin sha256:"+strings.Repeat("0", 64))
		out, err := runInstall(t, line, work, "--prefix", filepath.Join(work, "bad"), "--name", "inst0")
		if err == nil || !strings.Contains(out, "not installing") {
			t.Fatalf("err %v, output:\n%s", err, out)
		}
	})

	// A record altered on the way (here: the digest the script holds) no
	// longer matches its signature, and nothing is downloaded or run.
	t.Run("RecordNotSigned", func(t *testing.T) {
		line := c.installLine()
		resp, script := c.Do(ctltest.Request{Method: "GET", Path: "/install.sh"})
		if resp.StatusCode != 200 || !strings.Contains(string(script), digest) {
			t.Fatalf("GET /install.sh: %d, the release's digest in it: %v", resp.StatusCode, strings.Contains(string(script), digest))
		}
		forged := strings.ReplaceAll(string(script), digest, "sha256:"+strings.Repeat("a", 64))
		file := filepath.Join(work, "forged.sh")
		if err := os.WriteFile(file, []byte(forged), 0o644); err != nil {
			t.Fatal(err)
		}
		fetch, args, _ := strings.Cut(line, ` && sh "$d/install.sh" `)
		out, err := runInstall(t, fetch+" && sh "+file+" "+args, work, "--prefix", filepath.Join(work, "forged"), "--name", "inst0")
		if err == nil || !strings.Contains(out, "does not verify") {
			t.Fatalf("err %v, output:\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(work, "forged", "usr")); !os.IsNotExist(err) {
			t.Errorf("something was installed: %v", err)
		}
	})

	prefix := filepath.Join(work, "root")
	out, err := runInstall(t, c.installLine(), work, "--prefix", prefix, "--name", "inst1")
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if !strings.Contains(out, digest) {
		t.Errorf("the script did not name the release it installed (%s):\n%s", digest, out)
	}
	installed, err := os.ReadFile(filepath.Join(prefix, "usr/local/bin/mesh-host"))
	if err != nil || sha256.Sum256(installed) != sum {
		t.Fatalf("the installed mesh-host is not the published release (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(prefix, "var/lib/mesh-host/host.json")); err != nil {
		t.Fatalf("not enrolled: %v", err)
	}
	unitFile := filepath.Join(prefix, "etc/systemd/system/mesh-host.service")
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("UnitVerifies", func(t *testing.T) {
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			if os.Getenv("MESH_TEST_REQUIRE_SYSTEMD") != "" {
				t.Fatal("systemd-analyze is required (MESH_TEST_REQUIRE_SYSTEMD) but missing")
			}
			t.Skip("systemd-analyze not installed")
		}
		if out, err := exec.Command(analyze, "verify", unitFile).CombinedOutput(); err != nil {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	})

	// Start the launcher as the unit would: its ExecStart, word by word.
	m := regexp.MustCompile(`(?m)^ExecStart=(.+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatalf("no ExecStart in the installed unit:\n%s", unit)
	}
	argv := strings.Fields(string(m[1]))
	want := []string{filepath.Join(prefix, "var/lib/mesh-host/bin/mesh-host"), "launch", "--state", filepath.Join(prefix, "var/lib/mesh-host"), "--root", prefix}
	if strings.Join(argv, " ") != strings.Join(want, " ") {
		t.Fatalf("ExecStart %q, want %q", argv, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	launcher := exec.CommandContext(ctx, argv[0], argv[1:]...)
	launcher.Cancel = func() error { return launcher.Process.Signal(syscall.SIGTERM) }
	launcher.WaitDelay = 20 * time.Second
	log := &syncBuffer{}
	launcher.Stdout, launcher.Stderr = log, log
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = launcher.Wait()
		if t.Failed() {
			t.Logf("launcher log:\n%s", log.String())
		}
	})
	waitFor(t, 60*time.Second, "inst1 current", func() bool {
		mv := c.machine("inst1")
		return mv.State == models.StateCurrent && mv.HostVersion == "1.0.0"
	})
}
