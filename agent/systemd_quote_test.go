package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/models"
)

// TestSystemd_AVariableCannotAddADirectiveToAUnit: a machine's variable
// (an operator's to set) substituted into a service's env or argument is
// one word of the unit mesh writes, never a line of its own. systemd ends
// a unit file's line at a carriage return as at a newline, and the quoting
// escaped "\n" but not "\r": a value "hi\rExecStartPre=…\rUser=root" added
// both directives to the unit, which the controller composed and the host
// applied.
func TestSystemd_AVariableCannotAddADirectiveToAUnit(t *testing.T) {
	man := `{"resources": [{"name": "service", "kind": "service",
		"command": ["/opt/x/bin/run", "${var.greeting}"],
		"env": {"GREETING": "${var.greeting}"}}]}`
	for _, evil := range []string{"hi\rExecStartPre=/nonexistent/evil\rUser=root\r#", "hi\nExecStartPre=/nonexistent/evil", "a\x0bb\x0cc\x1bd\x7fe"} {
		p, err := models.ComposePayload(models.ComposeInput{Machine: "m1", Generation: 2, ComposedAt: time.Now(), ComposedBy: "ctl",
			Variables: map[string]string{"greeting": evil},
			Modules:   []models.ComposeModule{{Name: "x", Build: 1, Manifest: man}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := checkResources(p, []string{"/"}); err != nil {
			t.Fatal(err)
		}
		rootDir := t.TempDir()
		root, err := openMachineRoot(rootDir)
		if err != nil {
			t.Fatal(err)
		}
		stand := filepath.Join(t.TempDir(), "systemctl")
		if err := os.WriteFile(stand, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		s := newSystemd(root)
		s.systemctl = stand
		if _, err := s.Ensure(context.Background(), p.Resources[0], "sha256:1"); err != nil {
			t.Fatal(err)
		}
		unitFile := filepath.Join(rootDir, "etc/systemd/system", UnitName("x.service"))
		b, err := os.ReadFile(unitFile)
		if err != nil {
			t.Fatal(err)
		}
		// Lines as systemd reads them: ended by \n, \r or NUL.
		for _, line := range strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' || r == '\r' || r == 0 }) {
			if line = strings.TrimSpace(line); strings.HasPrefix(line, "ExecStartPre=") || strings.HasPrefix(line, "User=") {
				t.Errorf("the variable %q added %q to the unit mesh wrote:\n%q", evil, line, b)
			}
		}
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			if os.Getenv("MESH_TEST_REQUIRE_SYSTEMD") != "" {
				t.Fatal("systemd-analyze is required (MESH_TEST_REQUIRE_SYSTEMD) but missing")
			}
			continue
		}
		out, _ := exec.Command(analyze, "verify", unitFile).CombinedOutput()
		if strings.Contains(string(out), "/nonexistent/evil") || strings.Contains(string(out), "Invalid syntax") {
			t.Errorf("systemd-analyze verify reads the value %q as more than a word:\n%s", evil, out)
		}
	}
}

// TestSystemd_AFileCannotTakeAServicesUnit: a file resource of another
// module whose path a machine's variable named ("/etc/${var.conf}", conf
// set to a service's unit) wrote the unit the host writes for that service
// under --services systemd: both composed, the host applied both, and the
// unit started what the file said. The controller refuses to compose it,
// and the host refuses such a declaration.
func TestSystemd_AFileCannotTakeAServicesUnit(t *testing.T) {
	web := `{"resources": [{"name": "service", "kind": "service", "command": ["/opt/web/run"]}]}`
	zz := `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/${var.conf}",
		"content": "[Service]\nExecStart=/bin/sh -c 'id > /tmp/pwned'\n"}]}`
	in := models.ComposeInput{Machine: "m1", Generation: 2, ComposedAt: time.Now(), ComposedBy: "ctl",
		Variables: map[string]string{"conf": "systemd/system/" + UnitName("web.service")},
		Modules:   []models.ComposeModule{{Name: "web", Build: 1, Manifest: web}, {Name: "zz", Build: 1, Manifest: zz}}}
	if _, err := models.ComposePayload(in); err == nil || !strings.Contains(err.Error(), unitPath("web.service")) {
		t.Errorf("composed a file at web.service's unit: %v", err)
	}
	// A declaration composed otherwise (a controller of a release before
	// this rule): the host refuses it.
	in.Variables["conf"] = "zz.conf"
	p, err := models.ComposePayload(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Resources {
		if p.Resources[i].ID == "zz.conf" {
			p.Resources[i].Path = unitPath("web.service")
		}
	}
	if err := checkResources(p, []string{"/"}); err == nil || !strings.Contains(err.Error(), "both declare the path") {
		t.Errorf("the host took a file at web.service's unit: %v", err)
	}
}
