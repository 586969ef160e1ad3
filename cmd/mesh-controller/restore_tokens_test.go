package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
)

// The restore's API tokens, data dir and help (a review's findings): a
// token made since the backup is listed and revocable, one revoked since
// is listed revoked; a data dir that does not exist is refused; the help's
// example restores where the unit serves; a machine enrolled since is
// refused.

func TestRestore_APITokenMadeSinceStaysRevocable(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	ci := e.AddUser("ci", "operator")
	backupFile := filepath.Join(t.TempDir(), "b.db")
	if code, out, errOut := runCtl(t, "", "backup", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	var made struct{ ID, Token string }
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: ci,
		Body: map[string]any{"name": "leaky", "expires_in": "8760h"}}, 201, &made)
	admin := e.Admin
	e.Stop()
	if code, out, errOut := runCtl(t, "", "restore", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("restore: %d %s %s", code, out, errOut)
	}
	r := ctltest.StartWith(t, sc)
	r.Admin = admin
	works := func() bool {
		resp, _ := r.Do(ctltest.Request{Method: "GET", Path: "/api/v1/modules", Token: made.Token})
		return resp.StatusCode == 200
	}
	if !works() {
		t.Fatal("the token made since the backup is refused after the restore: the test's premise (it is signed by the same key) is gone")
	}
	resp, _ := r.Do(ctltest.Request{Method: "DELETE", Path: "/api/v1/api-tokens/" + made.ID, Token: admin})
	if resp.StatusCode != 200 || works() {
		t.Fatalf("an API token made after the backup still works after the restore, but revoking it by id answers %d (listed nowhere, unrevocable)", resp.StatusCode)
	}
}

// A token revoked after the backup is refused after the restore, but the
// restored api_tokens row still says active.
func TestRestore_APITokenRevokedSinceListedRevoked(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	ci := e.AddUser("ci", "operator")
	var made struct{ ID, Token string }
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: ci,
		Body: map[string]any{"name": "leaky", "expires_in": "720h"}}, 201, &made)
	backupFile := filepath.Join(t.TempDir(), "b.db")
	if code, out, errOut := runCtl(t, "", "backup", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/api-tokens/" + made.ID, Token: e.Admin}, 200, nil)
	admin := e.Admin
	e.Stop()
	if code, out, errOut := runCtl(t, "", "restore", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("restore: %d %s %s", code, out, errOut)
	}
	r := ctltest.StartWith(t, sc)
	var list struct {
		Items []struct{ ID, State string }
	}
	r.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/api-tokens", Token: admin}, 200, &list)
	for _, it := range list.Items {
		if it.ID == made.ID && it.State != "revoked" {
			t.Fatalf("a token revoked before the restore (and refused after it) is listed %q", it.State)
		}
	}
}

// The help's example restores into --data /var/lib/mesh; the packaged
// unit serves /var/lib/mesh-controller, and restore creates a missing
// data dir, so following the example "restores" into a directory nothing
// serves, printing success.
func TestRestore_HelpExampleDataDirIsTheUnits(t *testing.T) {
	unit, err := os.ReadFile("../../dist/systemd/mesh-controller.service")
	if err != nil {
		t.Fatal(err)
	}
	_, out, _ := runCtl(t, "", "restore", "--help")
	if strings.Contains(string(unit), "MESH_DATA_DIR=/var/lib/mesh-controller") && strings.Contains(out, "--data /var/lib/mesh\n") {
		t.Fatalf("the help's example restores into /var/lib/mesh; the unit serves /var/lib/mesh-controller")
	}
}

// A --data that does not exist (a typo) is created and "restored" into,
// with success and no word that nothing was replaced.
func TestRestore_MissingDataDirRefused(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	backupFile := filepath.Join(t.TempDir(), "b.db")
	if code, out, errOut := runCtl(t, "", "backup", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	e.Stop()
	typo := filepath.Join(t.TempDir(), "mesh-controler")
	code, out, _ := runCtl(t, "", "restore", backupFile, "--data", typo)
	if code == 0 && !strings.Contains(out, "no store") {
		t.Fatalf("restore into a data dir that did not exist succeeded silently:\n%s", out)
	}
}

// A machine enrolled after the backup: its host token after the restore.
func TestRestore_MachineEnrolledSinceRefused(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	backupFile := filepath.Join(t.TempDir(), "b.db")
	if code, out, errOut := runCtl(t, "", "backup", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	m2 := e.Enroll("m2")
	e.Stop()
	if code, out, errOut := runCtl(t, "", "restore", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("restore: %d %s %s", code, out, errOut)
	}
	r := ctltest.StartWith(t, sc)
	resp, _ := r.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=0s", Token: m2.Token})
	t.Logf("m2's token after the restore: %d", resp.StatusCode)
	if resp.StatusCode == 200 {
		t.Fatal("a machine the restored store does not know is served")
	}
}
