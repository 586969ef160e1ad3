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

// TestRestore_NothingLostNoRevocationUndone: a backup restored over a
// store that moved on — m2 enrolled and m1 revoked since — comes back as
// the backup has it, but m1 stays revoked (its token refused, its state
// revoked again) and the store it replaced is kept aside; with the
// controller serving, restore refuses and changes nothing.
func TestRestore_NothingLostNoRevocationUndone(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	m1 := e.Enroll("m1")
	backupFile := filepath.Join(t.TempDir(), "b.db")
	if code, out, errOut := runCtl(t, "", "backup", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	e.Enroll("m2")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/revoke", Token: e.Admin, Body: map[string]any{"reason": "disk sold"}}, 200, nil)

	// Served meanwhile: refused, and nothing changed.
	if code, _, errOut := runCtl(t, "", "restore", backupFile, "--data", sc.DataDir); code == 0 || !strings.Contains(errOut, "a controller serves") {
		t.Fatalf("restore under a serving controller: %d %s", code, errOut)
	}
	admin := e.Admin
	e.Stop()

	code, out, errOut := runCtl(t, "", "restore", backupFile, "--data", sc.DataDir)
	if code != 0 || !strings.Contains(out, "1 revocation(s) made since the backup carried into it; machines revoked again: m1") {
		t.Fatalf("restore: %d\n%s\n%s", code, out, errOut)
	}
	kept, err := filepath.Glob(filepath.Join(sc.DataDir, "mesh.db.before-restore-*"))
	if err != nil || len(kept) == 0 {
		t.Fatalf("the replaced store was not kept: %v %v", kept, err)
	}
	// The kept store is the one replaced, m2 and all.
	keptDir := t.TempDir()
	b, err := os.ReadFile(kept[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(keptDir, "mesh.db"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if b, err := os.ReadFile(kept[0] + suffix); err == nil {
			_ = os.WriteFile(filepath.Join(keptDir, "mesh.db"+suffix), b, 0o600)
		}
	}
	ks, err := store.Open(t.Context(), store.Config{DataDir: keptDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Machine(t.Context(), "m2"); err != nil {
		t.Fatalf("m2 is not in the kept store: %v", err)
	}
	ks.Close()

	r := ctltest.StartWith(t, sc)
	r.Admin = admin
	var m struct {
		State         string
		RevokedReason string `json:"revoked_reason"`
	}
	r.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: admin}, 200, &m)
	if m.State != "revoked" || !strings.Contains(m.RevokedReason, "disk sold") {
		t.Fatalf("m1 after the restore: %+v", m)
	}
	if resp, _ := r.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=0s", Token: m1.Token}); resp.StatusCode != 401 {
		t.Fatalf("m1's token after the restore: %d", resp.StatusCode)
	}
	if resp, _ := r.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m2", Token: admin}); resp.StatusCode != 404 {
		t.Fatalf("m2, enrolled after the backup: %d", resp.StatusCode)
	}
}
