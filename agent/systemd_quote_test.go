package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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
	for _, at := range []string{
		"systemd/system/" + UnitName("web.service"),
		"systemd/system/" + UnitName("web.service") + ".d/zz.conf", // a drop-in
		"systemd/system.control/" + UnitName("web.service"),        // ranked above
	} {
		in := models.ComposeInput{Machine: "m1", Generation: 2, ComposedAt: time.Now(), ComposedBy: "ctl",
			Variables: map[string]string{"conf": at},
			Modules:   []models.ComposeModule{{Name: "web", Build: 1, Manifest: web}, {Name: "zz", Build: 1, Manifest: zz}}}
		if _, err := models.ComposePayload(in); err == nil || !strings.Contains(err.Error(), UnitName("web.service")) {
			t.Errorf("composed a file at /etc/%s: %v", at, err)
		}
		// A declaration composed otherwise (a controller of a release
		// before this rule): the host refuses it.
		in.Variables["conf"] = "zz.conf"
		p, err := models.ComposePayload(in)
		if err != nil {
			t.Fatal(err)
		}
		for i := range p.Resources {
			if p.Resources[i].ID == "zz.conf" {
				p.Resources[i].Path = "/etc/" + at
			}
		}
		if err := checkResources(p, []string{"/"}); err == nil || !strings.Contains(err.Error(), UnitName("web.service")) {
			t.Errorf("the host took a file at /etc/%s: %v", at, err)
		}
	}
	// The host's own unit, and its drop-ins, are declarable files.
	host := `{"resources": [{"name": "unit", "kind": "file", "path": "/etc/systemd/system/mesh-host.service.d/limits.conf", "content": "[Service]\\nLimitNOFILE=65536\\n"}]}`
	if _, err := models.ComposePayload(models.ComposeInput{Machine: "m1", Generation: 2, ComposedAt: time.Now(), ComposedBy: "ctl",
		Modules: []models.ComposeModule{{Name: "hostunit", Build: 1, Manifest: host}}}); err != nil {
		t.Errorf("a drop-in of the host's own unit: %v", err)
	}
}

// systemdReadEnv writes r's unit as the systemd driver does and asks
// systemd's own parser what environment it read (systemd-analyze verify
// at debug level dumps the unit it loaded, an "Environment: K=V" line a
// variable), beside what the host's own supervisor gives.
func systemdReadEnv(t *testing.T, r models.Resource) (got, want []string, unit []byte) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("MESH_TEST_REQUIRE_SYSTEMD") != "" {
			t.Fatal("systemd-analyze is required (MESH_TEST_REQUIRE_SYSTEMD) but missing")
		}
		t.Skip("systemd-analyze not installed")
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
	if err := os.MkdirAll(filepath.Join(rootDir, "opt/x/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootDir, "opt/x/bin/run"), []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSystemd(root)
	s.systemctl = stand
	if _, err := s.Ensure(context.Background(), r, "sha256:1"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(rootDir, "etc/systemd/system", UnitName(r.ID))
	cmd := exec.Command(analyze, "verify", path)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=debug")
	out, _ := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimLeft(line, "\t"), "Environment: "); ok {
			got = append(got, v)
		}
	}
	hc, err := commandUnder(rootDir, r.Command, r.Env)
	if err != nil {
		t.Fatal(err)
	}
	want = append([]string(nil), hc.Env...)
	sort.Strings(got)
	sort.Strings(want)
	unit, _ = os.ReadFile(path)
	return got, want, unit
}

// TestSystemd_AnEnvValueWithADollarIsKept: Environment= does no variable
// expansion, so the "$$" written for ExecStart= reached the service as
// "$$": a password "pa$word" was not what the service got under
// --services systemd, though it was under the host's own supervisor.
func TestSystemd_AnEnvValueWithADollarIsKept(t *testing.T) {
	r := models.Resource{ID: "x.service", Module: "x", Build: 1, Kind: "service",
		Command: []string{"/opt/x/bin/run"},
		Env:     map[string]string{"DB_PASSWORD": "pa$word", "HASH": "$2a$10$abcdefghijklmnopqrstuv", "PERCENT": "100%", "TABBED": "a\tb"}}
	got, want, unit := systemdReadEnv(t, r)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("systemd reads the unit's environment as\n%q\nthe host's supervisor gives\n%q\nunit:\n%s", got, want, unit)
	}
}

// TestManifest_AnEnvNameSystemdDropsIsRefused: an env name the manifest
// took and the host's supervisor passed ("node.env-name") was dropped by
// systemd ("Invalid environment assignment, ignoring"): the service ran
// without it under --services systemd. It is refused at upload.
func TestManifest_AnEnvNameSystemdDropsIsRefused(t *testing.T) {
	m, err := models.ParseManifest([]byte(`{"resources": [{"name": "svc", "kind": "service", "command": ["/opt/x/run"], "env": {"node.env-name": "production"}}]}`))
	if err == nil {
		err = m.Buildable(false)
	}
	if err == nil || !strings.Contains(err.Error(), "node.env-name") {
		t.Fatalf("a manifest with the env name node.env-name: %v", err)
	}
}

// TestSystemd_NoFileChangesAServicesUnitFromAnotherDirectory: systemd
// reads a unit's drop-ins from every directory of its search path (not
// only the one its unit file won in), a name prefix's ("mesh-.service.d")
// and every service's ("service.d"); and a tree at a unit directory, or
// above one, holds whatever its archive does. Each of these changed
// mesh-web-service.service, composed and taken by the host.
func TestSystemd_NoFileChangesAServicesUnitFromAnotherDirectory(t *testing.T) {
	web := `{"resources": [{"name": "service", "kind": "service", "command": ["/opt/web/run"]}]}`
	file := func(at string) string {
		return `{"resources": [{"name": "conf", "kind": "file", "path": "` + at + `", "content": "[Service]\nExecStart=\nExecStart=/bin/sh\n"}]}`
	}
	tree := func(at string) string {
		return `{"resources": [{"name": "units", "kind": "tree", "path": "` + at + `", "artifact": {"digest": "sha256:` + strings.Repeat("a", 64) + `", "size": 10}}]}`
	}
	for _, man := range []string{
		file("/etc/systemd/system/service.d/zz.conf"),
		file("/run/systemd/system/service.d/zz.conf"),
		file("/etc/systemd/system/mesh-.service.d/zz.conf"),
		file("/etc/systemd/system/mesh-web-.service.d/zz.conf"),
		file("/usr/lib/systemd/system/" + UnitName("web.service") + ".d/zz.conf"),
		file("/usr/local/lib/systemd/system/" + UnitName("web.service") + ".d/zz.conf"),
		file("/etc/systemd/system.attached/" + UnitName("web.service") + ".d/zz.conf"),
		tree("/etc/systemd/system.control"),
		tree("/run/systemd/transient"),
		tree("/etc/systemd"),
		tree("/etc/systemd/system/" + UnitName("web.service") + ".d"),
	} {
		in := models.ComposeInput{Machine: "m1", Generation: 2, ComposedAt: time.Now(), ComposedBy: "ctl",
			Modules: []models.ComposeModule{{Name: "web", Build: 1, Manifest: web}, {Name: "zz", Build: 1, Manifest: man}}}
		if _, err := models.ComposePayload(in); err == nil {
			t.Errorf("composed %s", man)
		}
		p, err := models.ComposePayload(models.ComposeInput{Machine: "m1", Generation: 2, ComposedAt: time.Now(), ComposedBy: "ctl",
			Modules: []models.ComposeModule{{Name: "web", Build: 1, Manifest: web}, {Name: "zz", Build: 1, Manifest: strings.Replace(man, `"path": "/`, `"path": "/srv/`, 1)}}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range p.Resources { // as a controller of a release before the rule composed it
			if p.Resources[i].Module == "zz" {
				p.Resources[i].Path = strings.TrimPrefix(p.Resources[i].Path, "/srv")
			}
		}
		if err := checkResources(p, []string{"/"}); err == nil {
			t.Errorf("the host takes %s", man)
		}
	}
}

// TestSystemd_AStoredBuildsEnvNameSystemdDropsIsNotComposed: the env name
// rule was checked at upload only; a build stored before it was composed
// and applied, and systemd dropped the variable with nothing said.
func TestSystemd_AStoredBuildsEnvNameSystemdDropsIsNotComposed(t *testing.T) {
	man := `{"resources": [{"name": "service", "kind": "service", "command": ["/opt/x/run"], "env": {"node.env-name": "production"}}]}`
	if _, err := models.ComposePayload(models.ComposeInput{Machine: "m1", Generation: 2, ComposedAt: time.Now(), ComposedBy: "ctl",
		Modules: []models.ComposeModule{{Name: "x", Build: 1, Manifest: man}}}); err == nil {
		t.Errorf("composed a service whose env name systemd drops (node.env-name)")
	}
	p := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "x.service", Module: "x", Build: 1, Kind: "service", Command: []string{"/opt/x/run"}, Env: map[string]string{"node.env-name": "production"}}}}
	if err := checkResources(p, []string{"/"}); err == nil {
		t.Errorf("the host takes a service whose env name systemd drops (node.env-name)")
	}
}

// TestHostUnit_ADropInInAnotherUnitDirectoryIsRefused: the host checks a
// declared unit of its own, and drop-ins of it, only at
// /etc/systemd/system; one in any other unit directory (which systemd
// applies all the same) was taken unchecked, its ExecStart whatever it
// said. And /var/run is /run.
func TestHostUnit_ADropInInAnotherUnitDirectoryIsRefused(t *testing.T) {
	state := t.TempDir()
	evil := "[Service]\nExecStart=\nExecStart=/bin/sh -c true\n"
	for _, p := range []string{
		"/etc/systemd/system/mesh-host.service.d/x.conf", // checked there
		"/run/systemd/system/mesh-host.service.d/x.conf",
		"/etc/systemd/system.control/mesh-host.service.d/x.conf",
		"/usr/lib/systemd/system/mesh-host.service.d/x.conf",
		"/var/run/systemd/system/mesh-web-api.service.d/x.conf",
		"/var/run/systemd/transient/mesh-web-api.service",
	} {
		d := unitDecl("host.dropin", p, evil)
		err := checkResources(d, []string{"/"})
		if err == nil {
			err = checkHostUnit(d, state)
		}
		if err == nil {
			t.Errorf("%s: taken by the host", p)
		}
	}
	if models.UnitAt("/var/run") == "" {
		t.Error("a tree at /var/run (/run) is not refused")
	}
	// A drop-in for every service is said so, not called a unit of mesh's.
	if w := models.UnitAt("/etc/systemd/system/service.d/limits.conf"); !strings.Contains(w, "every service's drop-ins") {
		t.Errorf("UnitAt of every service's drop-in: %q", w)
	}
}
