package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestRestore_PeopleAsTheReplacedStoreHasThem: a person disabled after the
// backup stays disabled, one added since keeps their login, one only the
// backup has is disabled — a restore lets no one in whom the replaced
// store kept out.
func TestRestore_PeopleAsTheReplacedStoreHasThem(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	e.AddUser("eve", "operator")
	e.AddUser("gone", "viewer")
	backupFile := filepath.Join(t.TempDir(), "b.db")
	if code, out, errOut := runCtl(t, "", "backup", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/users/eve", Token: e.Admin, Body: map[string]any{"disabled": true}}, 200, nil)
	e.AddUser("fred", "viewer")
	if err := e.Ctl.Store.DB().Exec("DELETE FROM users WHERE name = 'gone'").Error; err != nil {
		t.Fatal(err)
	}
	e.Stop()
	code, out, errOut := runCtl(t, "", "restore", backupFile, "--data", sc.DataDir)
	if code != 0 || !strings.Contains(out, "disabled, as only the backup has them: gone") {
		t.Fatalf("restore: %d\n%s\n%s", code, out, errOut)
	}
	r := ctltest.StartWith(t, sc)
	login := func(who string) int {
		resp, _ := r.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login", Body: map[string]string{"username": who, "password": "password-of-" + who}})
		return resp.StatusCode
	}
	if st := login("eve"); st == 200 {
		t.Fatal("eve, disabled before the restore, logs in after it")
	}
	if st := login("gone"); st == 200 {
		t.Fatal("a person removed before the restore logs in after it")
	}
	if st := login("fred"); st != 200 {
		t.Fatalf("fred, added before the restore, cannot log in after it: %d", st)
	}
}

// TestRestore_NothingLostTwiceAndBroken: two restores in one second keep
// both replaced stores; a replaced store that cannot be read is moved
// aside all the same, saying nothing could be carried; a store's own file
// with its log beside it is refused as no backup.
func TestRestore_NothingLostTwiceAndBroken(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	backupFile := filepath.Join(t.TempDir(), "b.db")
	if code, out, errOut := runCtl(t, "", "backup", backupFile, "--data", sc.DataDir); code != 0 {
		t.Fatalf("backup: %d %s %s", code, out, errOut)
	}
	e.Stop()
	now := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	r1, err := store.Restore(t.Context(), sc.DataDir, backupFile, now)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := store.Restore(t.Context(), sc.DataDir, backupFile, now.Add(500*time.Millisecond))
	if err != nil || r2.Kept == r1.Kept {
		t.Fatalf("a second restore in the same second: kept %q then %q, %v", r1.Kept, r2.Kept, err)
	}
	for _, k := range []string{r1.Kept, r2.Kept} {
		if _, err := os.Stat(k); err != nil {
			t.Fatalf("a replaced store is lost: %v", err)
		}
	}
	db := filepath.Join(sc.DataDir, "mesh.db")
	if err := os.WriteFile(db, []byte("not a database, a disk's garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	code, out, errOut := runCtl(t, "", "restore", backupFile, "--data", sc.DataDir)
	if code != 0 || !strings.Contains(out, "WARNING: nothing was carried from the store it replaced") {
		t.Fatalf("restore over a store that cannot be read: %d\n%s\n%s", code, out, errOut)
	}
	if err := os.WriteFile(backupFile+"-wal", []byte("a log"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCtl(t, "", "restore", backupFile, "--data", sc.DataDir); code == 0 || !strings.Contains(errOut, "not a backup") {
		t.Fatalf("a store's own file with its log: %d %s", code, errOut)
	}
}
