package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/testwait"
)

// checkedService is a declaration of a script (a tree, with more entries
// if given), its config (a file) and a service running the script, checked
// by exec.
func checkedService(t *testing.T, a *Agent, script string, check []string, more ...tarEntry) *models.DeclarationPayload {
	t.Helper()
	dg := cacheBlob(t, a, makeTar(t, append([]tarEntry{{name: "bin/run", body: script, mode: 0o755}}, more...)...))
	conf := "port=9000\n"
	d := treeDecl(dg, "/opt/x")
	d.Resources = append(d.Resources,
		models.Resource{ID: "mod.conf", Module: "mod", Build: 1, Kind: "file", Path: "/etc/x.conf", Content: &conf},
		models.Resource{ID: "mod.service", Module: "mod", Build: 1, Kind: "service", Command: []string{"/opt/x/bin/run"},
			Env: map[string]string{"PORT": "9000"}, After: []string{"mod.tree", "mod.conf"}, Check: &models.Check{Exec: check}})
	return d
}

// applyChecked applies d in full and runs its checks as an apply does,
// stopping its services when the test ends.
func applyChecked(t *testing.T, a *Agent, d *models.DeclarationPayload, settle time.Duration) []models.CheckResult {
	t.Helper()
	st := a.state.clone()
	if _, err := a.applyInFull(context.Background(), d, st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.services.Stop(context.Background(), "mod.service") })
	return checkAll(context.Background(), a.root, nil, d.Resources, settle)
}

// TestExecCheck_RunsLikeItsService pins the failure where a service ran
// under --root (its directory, its env) while its exec check ran another
// way, so the check failed on a healthy service yet the apply said
// applied. The script, as service and as check, asks the same things:
// its config at a path relative to where it runs, and its env.
func TestExecCheck_RunsLikeItsService(t *testing.T) {
	a := testAgent(t)
	probe := filepath.Join(t.TempDir(), "service-saw")
	script := "#!/bin/sh\n" +
		`if [ "$1" = --check ]; then test -f etc/x.conf && [ "$PORT" = 9000 ] && [ "$MESH_ROOT" = "` + a.root.dir + `" ]; exit $?; fi` + "\n" +
		`pwd > ` + probe + `.tmp; echo "$PORT $MESH_ROOT" >> ` + probe + `.tmp; mv ` + probe + `.tmp ` + probe + "\n" +
		"exec sleep 1000\n"
	d := checkedService(t, a, script, []string{"/opt/x/bin/run", "--check"})
	checks := applyChecked(t, a, d, 5*time.Second)
	var saw []byte
	testwait.Until(10*time.Second, func() bool {
		b, err := os.ReadFile(probe)
		saw = b
		return err == nil
	})
	if want := a.root.dir + "\n9000 " + a.root.dir + "\n"; string(saw) != want {
		t.Fatalf("the service ran with %q, want %q", saw, want)
	}
	if len(checks) != 1 || !checks[0].OK {
		t.Fatalf("the check of a healthy service failed: %+v", checks)
	}
}

// TestExecCheck_CannotRunFailsAtOnce: a check whose command is missing or
// not executable is a failing check, and says so at once instead of
// retrying for the whole settle time.
func TestExecCheck_CannotRunFailsAtOnce(t *testing.T) {
	for name, check := range map[string][]string{
		"missing":        {"/opt/x/bin/missing"},
		"not executable": {"/opt/x/bin/plain"},
	} {
		t.Run(name, func(t *testing.T) {
			a := testAgent(t)
			script := "#!/bin/sh\nexec sleep 1000\n"
			d := checkedService(t, a, script, check, tarEntry{name: "bin/plain", body: "#!/bin/sh\n"})
			st := a.state.clone()
			if _, err := a.applyInFull(context.Background(), d, st); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = a.services.Stop(context.Background(), "mod.service") })
			done := make(chan []models.CheckResult, 1)
			go func() { done <- checkAll(context.Background(), a.root, nil, d.Resources, 15*time.Second) }()
			select {
			case checks := <-done:
				if len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].Detail, "cannot run") {
					t.Fatalf("checks %+v", checks)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a check that cannot run blocked the apply for the settle time")
			}
		})
	}
}

// TestCommand_OneRule: a service's command under the host's supervisor,
// its systemd unit and its exec check are mapped by one function.
func TestCommand_OneRule(t *testing.T) {
	root, err := openMachineRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hc, err := root.command([]string{"/opt/x/bin/run", "--config", "/etc/x.conf"}, map[string]string{"PORT": "9000"})
	if err != nil {
		t.Fatal(err)
	}
	if hc.Path != root.dir+"/opt/x/bin/run" || strings.Join(hc.Args, " ") != "--config /etc/x.conf" || hc.Dir != root.dir {
		t.Fatalf("%+v", hc)
	}
	if !strings.Contains(strings.Join(hc.Env, "\n"), "MESH_ROOT="+root.dir+"\n") || hc.Env[len(hc.Env)-1] != "PORT=9000" {
		t.Fatalf("env %q", hc.Env)
	}
	unit, err := Unit(models.Resource{ID: "x.service", Command: []string{"/opt/x/bin/run"}, Env: map[string]string{"PORT": "9000"}}, "sha256:1", root.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`ExecStart="` + hc.Path + `"`, "WorkingDirectory=" + root.dir, `Environment="MESH_ROOT=` + root.dir + `"`, `Environment="PORT=9000"`} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %s:\n%s", want, unit)
		}
	}
	if _, err := root.command([]string{"bin/run"}, nil); err == nil {
		t.Fatal("a relative command was mapped")
	}
}

// TestExecCheck_RefusedLikeItsCommand: an exec check's command is held to
// what a service's command is: absolute, under an allowed root.
func TestExecCheck_RefusedLikeItsCommand(t *testing.T) {
	for name, tc := range map[string]struct {
		exec []string
		says string
	}{
		"relative":      {[]string{"curl", "-f", "http://127.0.0.1:9000"}, "bad field"},
		"outside roots": {[]string{"/usr/bin/curl"}, "escape"},
	} {
		t.Run(name, func(t *testing.T) {
			d := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{{ID: "mod.service", Kind: "service",
				Command: []string{"/opt/x/bin/run"}, Check: &models.Check{Exec: tc.exec}}}}
			err := checkResources(d, []string{"/opt"})
			var rf *refusal
			if !errors.As(err, &rf) || !strings.HasPrefix(rf.reason, tc.says) {
				t.Fatalf("want a refusal saying %q, got %v", tc.says, err)
			}
		})
	}
}

// A failing check that says nothing is said as its exit, without a
// dangling ": " after it; one that says something keeps its words.
func TestExecCheck_FailingSaysItsExitAndWords(t *testing.T) {
	for script, want := range map[string]string{
		"#!/bin/sh\nif [ \"$1\" = --check ]; then exit 1; fi\nexec sleep 1000\n":               "exec /opt/x/bin/run --check: exit status 1",
		"#!/bin/sh\nif [ \"$1\" = --check ]; then echo refused; exit 2; fi\nexec sleep 1000\n": "exec /opt/x/bin/run --check: exit status 2: refused",
	} {
		a := testAgent(t)
		d := checkedService(t, a, script, []string{"/opt/x/bin/run", "--check"})
		checks := applyChecked(t, a, d, 0)
		if len(checks) != 1 || checks[0].OK || checks[0].Detail != want {
			t.Errorf("checks %+v, want one failing saying %q", checks, want)
		}
	}
}
