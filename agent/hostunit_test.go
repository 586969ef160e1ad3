package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

func TestIsUnitFile(t *testing.T) {
	for _, c := range []struct {
		path       string
		unit, host bool
	}{
		{"/etc/systemd/system/mesh-host.service", true, true},
		{"/etc/systemd/system/mesh-host.service.d/limits.conf", true, true},
		{"/etc/systemd/system/web.service", true, false},
		{"/etc/systemd/system/backup.timer", true, false},
		{"/etc/systemd/system/web.service.d/override.conf", true, false},
		{"/etc/systemd/system/../system/mesh-host.service", true, true},
		{"/etc/systemd/system/notes.txt", false, false},
		{"/etc/systemd/system/a/b/c.service", false, false},
		{"/etc/web.service", false, false},
		{"/usr/lib/systemd/system/mesh-host.service", false, false},
	} {
		t.Run(c.path, func(t *testing.T) {
			if got := isUnitFile(c.path); got != c.unit {
				t.Errorf("isUnitFile = %v", got)
			}
			if got := isHostUnit(c.path); got != c.host {
				t.Errorf("isHostUnit = %v", got)
			}
		})
	}
}

// shippedUnit is dist/systemd/mesh-host.service for a host whose state
// dir is state.
func shippedUnit(t *testing.T, state string) string {
	t.Helper()
	b, err := os.ReadFile("../dist/systemd/mesh-host.service")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "/var/lib/mesh-host", state)
}

func unitDecl(id, path, content string) *models.DeclarationPayload {
	return &models.DeclarationPayload{Resources: []models.Resource{{ID: id, Module: "host", Build: 1, Kind: "file", Path: path, Content: &content, Mode: "0644"}}}
}

// TestHostUnit_Declared: the shipped unit, declared as a file resource,
// is written where systemd reads it, passes systemd-analyze verify, and
// systemd is reloaded after each apply that changed it (not after one that
// did not; a failed reload is owed until one succeeds).
func TestHostUnit_Declared(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is needed to verify the declared unit")
	}
	a := testAgent(t)
	if err := EnsureStablePath(a.cfg.StateDir, "/bin/true"); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	fail := filepath.Join(t.TempDir(), "fail")
	a.cfg.Systemctl = filepath.Join(t.TempDir(), "systemctl")
	if err := os.WriteFile(a.cfg.Systemctl, []byte("#!/bin/sh\n[ -e "+fail+" ] && { echo no systemd >&2; exit 1; }\necho \"$*\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	apply := func(d *models.DeclarationPayload) ([]models.Action, error) {
		t.Helper()
		if err := checkHostUnit(d, a.cfg.StateDir); err != nil {
			t.Fatalf("refused: %v", err)
		}
		st := a.state.clone()
		acts, err := a.applyInFull(ctx, d, st)
		a.state = st
		return acts, err
	}
	ncalls := func() int { b, _ := os.ReadFile(calls); return strings.Count(string(b), "daemon-reload\n") }

	unit := shippedUnit(t, a.cfg.StateDir)
	const path = "/etc/systemd/system/mesh-host.service"
	acts, err := apply(unitDecl("host.unit", path, unit))
	if err != nil || acts[0].Action != "created" || !strings.Contains(acts[0].Detail, "systemd reloaded") || ncalls() != 1 {
		t.Fatalf("first apply: %+v %v, %d reloads", acts, err, ncalls())
	}
	written := filepath.Join(a.root.dir, path)
	if out, err := exec.Command(analyze, "verify", written).CombinedOutput(); err != nil {
		t.Fatalf("systemd-analyze verify of the declared unit: %v\n%s", err, out)
	}
	if acts, err := apply(unitDecl("host.unit", path, unit)); err != nil || acts[0].Action != "unchanged" || ncalls() != 1 {
		t.Fatalf("unchanged apply: %+v %v, %d reloads", acts, err, ncalls())
	}

	// The reload fails: the apply fails, and the retry (the file now
	// unchanged) still reloads.
	unit = strings.Replace(unit, "LimitNOFILE=65536", "LimitNOFILE=131072", 1)
	if err := os.WriteFile(fail, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(unitDecl("host.unit", path, unit)); err == nil || !strings.Contains(err.Error(), "daemon-reload failed") {
		t.Fatalf("apply with a failing reload: %v", err)
	}
	os.Remove(fail)
	if acts, err := apply(unitDecl("host.unit", path, unit)); err != nil || acts[0].Action != "unchanged" || ncalls() != 2 {
		t.Fatalf("retry: %+v %v, %d reloads", acts, err, ncalls())
	}
	// Removed: reloaded again.
	if acts, err := apply(&models.DeclarationPayload{EmptyOK: true}); err != nil || acts[0].Action != "removed" || ncalls() != 3 {
		t.Fatalf("removal: %+v %v, %d reloads", acts, err, ncalls())
	}
	if exists(written) {
		t.Fatal("the unit is still there")
	}
}

// TestHostUnit_MustStartTheStablePath: a declared unit of the host that
// starts anything but the stable path is refused whole; other units and
// drop-ins that leave ExecStart alone are not the host's concern.
func TestHostUnit_MustStartTheStablePath(t *testing.T) {
	state := t.TempDir()
	stable := StablePath(state)
	for _, c := range []struct {
		name, path, content, refused string
	}{
		{"Shipped", "/etc/systemd/system/mesh-host.service", shippedUnit(t, state), ""},
		{"WithRoot", "/etc/systemd/system/mesh-host.service", "[Service]\nExecStart=" + stable + " launch --state " + state + " --root /srv\n", ""},
		{"PackagedBinary", "/etc/systemd/system/mesh-host.service", "[Service]\nExecStart=/usr/bin/mesh-host launch --state " + state + "\n",
			`starting "/usr/bin/mesh-host launch --state ` + state + `"; it must start the stable path`},
		{"RunNotLaunch", "/etc/systemd/system/mesh-host.service", "[Service]\nExecStart=" + stable + " run --state " + state + "\n", "must start the stable path"},
		{"NoExecStart", "/etc/systemd/system/mesh-host.service", "[Service]\nRestart=always\n", "without an ExecStart"},
		{"DropInLimits", "/etc/systemd/system/mesh-host.service.d/limits.conf", "[Service]\nLimitNOFILE=1000\n", ""},
		{"DropInResetThenOther", "/etc/systemd/system/mesh-host.service.d/x.conf", "[Service]\nExecStart=\nExecStart=/bin/sh -c true\n", "must start the stable path"},
		{"DropInResetOnly", "/etc/systemd/system/mesh-host.service.d/x.conf", "[Service]\nExecStart=\n", "must start the stable path"},
		{"OtherUnit", "/etc/systemd/system/web.service", "[Service]\nExecStart=/opt/web/run\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkHostUnit(unitDecl("host.unit", c.path, c.content), state)
			var rf *refusal
			switch {
			case c.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refused != "" && (!errors.As(err, &rf) || !strings.Contains(err.Error(), c.refused)):
				t.Fatalf("got %v, want a refusal saying %q", err, c.refused)
			}
		})
	}
}

// TestHostUnit_SpacedExecStartIsRefused: the unit is read as systemd reads
// it. systemd takes "ExecStart = /x" (whitespace around '=') and a line
// continued with a backslash; a declared unit or drop-in that, so written,
// resets ExecStart and starts something else (here sleep, which would take
// the machine out of the mesh at its next restart) is refused, as is one
// hiding an ExecStart in a continued line.
func TestHostUnit_SpacedExecStartIsRefused(t *testing.T) {
	state := t.TempDir()
	stable := StablePath(state)
	for _, d := range []*models.DeclarationPayload{
		unitDecl("host.unit", "/etc/systemd/system/mesh-host.service", shippedUnit(t, state)+"\n[Service]\nExecStart =\nExecStart = /usr/bin/sleep infinity\n"),
		unitDecl("host.dropin", "/etc/systemd/system/mesh-host.service.d/10-x.conf", "[Service]\nExecStart =\nExecStart = /usr/bin/sleep infinity\n"),
		unitDecl("host.dropin", "/etc/systemd/system/mesh-host.service.d/10-x.conf", "[Service]\n\tExecStart\t=\t/usr/bin/sleep infinity\n"),
		unitDecl("host.dropin", "/etc/systemd/system/mesh-host.service.d/10-x.conf", "[Service]\nEnvironment=A=1 \\\nExecStart=/usr/bin/sleep infinity\n"),
		unitDecl("host.dropin", "/etc/systemd/system/mesh-host.service.d/10-x.conf", "[Service]\nExecStart="+stable+" launch \\\n# x\n; /usr/bin/sleep\n"),
	} {
		if err := checkHostUnit(d, state); err == nil {
			t.Errorf("%s, which has systemd start something else than %s launch, passed checkHostUnit:\n%s", d.Resources[0].Path, stable, *d.Resources[0].Content)
		}
	}
	// Spaced and continued, the stable path passes.
	ok := "[Service]\nExecStart =\nExecStart = " + stable + " launch \\\n  --state " + state + "\n"
	if err := checkHostUnit(unitDecl("host.dropin", "/etc/systemd/system/mesh-host.service.d/10-x.conf", ok), state); err != nil {
		t.Errorf("refused %q: %v", ok, err)
	}
}

// TestHostUnit_CarriageReturnHidesExecStart: systemd ends a line at a lone
// '\r' and at NUL as well as at '\n' (systemd-analyze verify reports
// "Unknown key 'X'" for "ExecStart=/bin/true\rX=1"). A unit whose
// ExecStart line carried "\rExecStart=\rExecStart=/usr/bin/sleep infinity"
// passed the guard as one ExecStart of the stable path; systemd would
// have started sleep.
func TestHostUnit_CarriageReturnHidesExecStart(t *testing.T) {
	state := t.TempDir()
	stable := StablePath(state)
	for name, content := range map[string]string{
		"CR":  "[Service]\nExecStart=" + stable + " launch --state " + state + "\rExecStart=\rExecStart=/usr/bin/sleep infinity\n",
		"NUL": "[Service]\nExecStart=" + stable + " launch --state " + state + "\x00ExecStart=\x00ExecStart=/usr/bin/sleep infinity\n",
	} {
		if err := checkHostUnit(unitDecl("host.unit", "/etc/systemd/system/mesh-host.service", content), state); err == nil {
			t.Errorf("%s: a unit that systemd reads as ExecStart=/usr/bin/sleep infinity passed checkHostUnit: %q", name, content)
		}
	}
}

// TestHostUnit_EscapedBackslashIsNoContinuation: systemd continues a line
// only on an unescaped trailing backslash; "X-Foo=bar\\\\" ends the line, so
// the following "ExecStart=" resets the list and the unit has no ExecStart
// (systemd-analyze verify: "Service has no ExecStart=... Refusing", no host
// at the next restart). The guard joins it into X-Foo's value and passes it.
func TestHostUnit_EscapedBackslashIsNoContinuation(t *testing.T) {
	state := t.TempDir()
	stable := StablePath(state)
	content := "[Service]\nExecStart=" + stable + " launch --state " + state + "\nX-Foo=bar\\\\\nExecStart=\n"
	if err := checkHostUnit(unitDecl("host.unit", "/etc/systemd/system/mesh-host.service", content), state); err == nil {
		t.Errorf("a unit whose last ExecStart (to systemd) only resets it passed checkHostUnit: %q", content)
	}
}
