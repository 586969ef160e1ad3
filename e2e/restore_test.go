package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStoreRestoredFromBackup_Conflict: the store is put back to an earlier
// copy while the host runs. The host has finished a generation newer than
// the store holds: the machine goes to conflict and nothing is sent, so
// nothing is torn down, until an admin resolves it with a generation past
// the host's, composed from the store as it is.
func TestStoreRestoredFromBackup_Conflict(t *testing.T) {
	c := startController(t, store.SQLite)
	c.module("conf")
	c.upload("conf", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/conf", "content": "x=${var.x}\n"}]}`, nil)
	h := enroll(t, c, "m1", c.URL)
	h.start()
	c.setVars("m1", map[string]string{"x": "1"})
	c.assign("m1", "conf")
	old := c.waitApplied("m1", 30*time.Second)

	db := filepath.Join(c.cfg.DataDir, "mesh.db")
	backup := filepath.Join(t.TempDir(), "mesh.db")
	c.stop()
	copyFile(t, db, backup)
	c.start()
	c.setVars("m1", map[string]string{"x": "2"})
	newer := c.waitApplied("m1", 30*time.Second)
	conf := filepath.Join(h.Root, "etc/conf")
	if b, _ := os.ReadFile(conf); string(b) != "x=2\n" {
		t.Fatalf("conf %q", b)
	}

	// Restore the backup.
	c.stop()
	copyFile(t, backup, db)
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	c.start()
	var m machineView
	waitFor(t, 30*time.Second, "m1 in conflict", func() bool {
		m = c.machine("m1")
		return m.State == "conflict"
	})
	if m.Generation != old.Generation {
		t.Fatalf("the restored store holds generation %d, want %d", m.Generation, old.Generation)
	}
	var full struct {
		ConflictHostGen int64 `json:"conflict_host_generation"`
	}
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: c.Admin}, 200, &full)
	if full.ConflictHostGen != newer.Generation {
		t.Fatalf("conflict names host generation %d, want %d", full.ConflictHostGen, newer.Generation)
	}
	if b, _ := os.ReadFile(conf); string(b) != "x=2\n" {
		t.Fatalf("the conflict tore something down: conf %q", b)
	}
	n := len(h.journal())

	// An admin resolves it: a generation past the host's, from the store as it is.
	var resolved struct{ Generation int64 }
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: c.Admin}, 200, &resolved)
	if resolved.Generation <= newer.Generation {
		t.Fatalf("resolved at generation %d, not past the host's %d", resolved.Generation, newer.Generation)
	}
	c.waitApplied("m1", 30*time.Second)
	if b, _ := os.ReadFile(conf); string(b) != "x=1\n" {
		t.Fatalf("after resolve, conf %q (the store's content is x=1)", b)
	}
	for _, e := range h.journal()[n:] {
		if e.Outcome == "refused" {
			t.Fatalf("the host refused after the resolve: %+v", e)
		}
	}
}
