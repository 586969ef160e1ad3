package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
)

// TestMeshctl_FleetAdmin: an admin's day without curl — a machine's
// variables shown, set and removed (written with If-Match), the host
// releases listed, the audit log read, a machine revoked with a reason
// and deleted.
func TestMeshctl_FleetAdmin(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1")
	e.Enroll("m2")
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("MESH_CONTROLLER", e.URL)
	t.Setenv("MESH_TOKEN", e.Admin)
	meshctl := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("meshctl %v: exit %d: %s", args, code, errOut.String())
		}
		return out.String()
	}

	meshctl("machines", "vars", "m1", "port=9000", "region=eu")
	meshctl("machines", "vars", "m1", "region=")
	// Nothing to change: said so, not "written" (no new generation).
	if out := meshctl("machines", "vars", "m1", "port=9000", "region="); !strings.Contains(out, "m1: variables unchanged, generation ") {
		t.Fatalf("vars as they are:\n%s", out)
	}
	if out := meshctl("machines", "vars", "m1"); !strings.Contains(out, "port") || !strings.Contains(out, "9000") || strings.Contains(out, "region") {
		t.Fatalf("variables:\n%s", out)
	}
	var vars struct{ Variables map[string]string }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/variables", Token: e.Admin}, 200, &vars)
	if len(vars.Variables) != 1 || vars.Variables["port"] != "9000" {
		t.Fatalf("the store's variables: %v", vars.Variables)
	}
	// Removing a variable a manifest names holds the machine back: the
	// edit says so (it said only "variables written").
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
	if resp, b := e.Upload(e.Admin, "web", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/web.conf", "content": "port=${var.port}\n"}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	meshctl("assign", "m1", "web")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"machines", "vars", "m1", "port="}, strings.NewReader(""), &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "m1: variables written, generation ") ||
		!strings.Contains(errOut.String(), "note: m1's generation cannot be composed") || !strings.Contains(errOut.String(), "${var.port}") {
		t.Fatalf("vars m1 port=: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	meshctl("machines", "vars", "m1", "port=9000")
	if out := meshctl("releases", "ls"); !strings.Contains(out, "1.5.0") || !strings.Contains(out, "1,2") || strings.Contains(out, "fleet default") {
		t.Fatalf("releases:\n%s", out)
	}
	// The fleet's default is said (only the dashboard said it).
	if err := e.Ctl.Store.DB().Create(&models.Setting{Key: models.SettingHostDefault, Value: "1.5.0"}).Error; err != nil {
		t.Fatal(err)
	}
	if out := meshctl("releases", "ls"); !strings.Contains(out, "default version, not rolled out on this platform") {
		t.Fatalf("releases, 1.5.0 the fleet default never rolled out:\n%s", out)
	}
	if err := e.Ctl.Store.DB().Model(&models.Release{}).Where("version = ?", "1.5.0").Update("rolled_out_at", time.Now()).Error; err != nil {
		t.Fatal(err)
	}
	if out := meshctl("releases", "ls"); !strings.Contains(out, "fleet default") {
		t.Fatalf("releases, 1.5.0 the fleet default:\n%s", out)
	}
	if out := meshctl("releases", "show", "1.5.0"); !strings.Contains(out, "PLATFORM") || !strings.Contains(out, "ready") ||
		!strings.Contains(out, "no rollout of 1.5.0 yet") {
		t.Fatalf("releases show:\n%s", out)
	}
	var showErr bytes.Buffer
	if code := run(context.Background(), []string{"releases", "show", "9.9.9"}, strings.NewReader(""), &bytes.Buffer{}, &showErr); code == 0 ||
		!strings.Contains(showErr.String(), "no host release 9.9.9") {
		t.Fatalf("releases show of no release: exit %d, %s", code, showErr.String())
	}
	meshctl("machines", "revoke", "m2", "--reason", "disk sold")
	if out := meshctl("machines", "show", "m2"); !strings.Contains(out, "revoked: disk sold") ||
		(strings.Contains(out, "Health:") && strings.Contains(out, "passing") && !strings.Contains(out, "no fact of now")) {
		t.Fatalf("m2 after revoke:\n%s", out)
	}
	meshctl("machines", "delete", "m2")
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m2", Token: e.Admin}, 404, nil)
	if out := meshctl("audit", "--limit", "10"); !strings.Contains(out, "machine/m2") || !strings.Contains(out, "ACTION") {
		t.Fatalf("audit:\n%s", out)
	}
	// The instance serving this test, as /instances has it.
	var inst struct{ Items []struct{ ID string } }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/instances", Token: e.Admin}, 200, &inst)
	if out := meshctl("instances"); len(inst.Items) == 0 || !strings.Contains(out, "HEARTBEAT") ||
		!strings.Contains(out, inst.Items[0].ID) || !strings.Contains(out, "serving") {
		t.Fatalf("instances (the API has %+v):\n%s", inst.Items, out)
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"machines", "vars", "m1", "nokey"}, strings.NewReader(""), &bytes.Buffer{}, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "KEY=VALUE") {
		t.Fatalf("a bad variable: exit %d, %s", code, errOut.String())
	}
}

// TestMeshctl_SavedLoginIsAnotherControllers: the saved token is never
// sent to another controller, and the refusal there says whose login is
// saved and how to log in where it was asked.
func TestMeshctl_SavedLoginIsAnotherControllers(t *testing.T) {
	one, other := ctltest.Start(t, store.SQLite), ctltest.Start(t, store.SQLite)
	one.AddUser("ops", "operator")
	mc := buildMeshctl(t)
	if r := mc.run("password-of-ops\n", "login", one.URL, "--user", "ops", "--password-stdin"); r.code != 0 {
		t.Fatalf("login: %s", r)
	}
	r := mc.run("", "machines", "ls", "--controller", other.URL)
	if r.code != 1 || !strings.Contains(r.stderr, "the saved login is for "+one.URL+", not "+other.URL) {
		t.Fatalf("another controller: %s", r)
	}
}

// TestMeshctl_Passwd: a person sets their own password from stdin (the
// current, then the new), and is told to log in again; a wrong current
// password is the controller's 403, printed.
func TestMeshctl_Passwd(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	session := e.AddUser("carol", "operator")
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("MESH_CONTROLLER", e.URL)
	t.Setenv("MESH_TOKEN", session)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"users", "passwd", "--password-stdin"}, strings.NewReader("wrong\na brand new password\n"), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "the current password is wrong") {
		t.Fatalf("a wrong current password: exit %d: %s", code, errOut.String())
	}
	out.Reset()
	code = run(context.Background(), []string{"users", "passwd", "--password-stdin"}, strings.NewReader("password-of-carol\na brand new password\n"), &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "password changed") || !strings.Contains(out.String(), "meshctl login "+e.URL) {
		t.Fatalf("passwd: exit %d: %s %s", code, out.String(), errOut.String())
	}
}
