package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRestore_ARevokedMachineKeepsWhoRevokedIt: a machine revoked by a
// person after the backup is revoked again by the restore
// (carryRevocations), whose revocation row names who revoked it; the
// machine's revoked_by was left empty, so its words said "by someone
// before this was recorded" of a revocation minutes old.
func TestRestore_ARevokedMachineKeepsWhoRevokedIt(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.SQLite)
	s := storetest.MustOpenConfig(t, cfg)
	served(t, s)
	fixture(t, s, "m1")
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeMachine(ctx, "user:alice", "m1", "stolen laptop"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := store.Restore(ctx, cfg.DataDir, backup, time.Now()); err != nil {
		t.Fatal(err)
	}
	r := storetest.MustOpenConfig(t, cfg)
	m, err := r.Machine(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if m.RevokedAt == nil {
		t.Fatalf("m1 is not revoked after the restore")
	}
	now := time.Now()
	w := models.SayState(models.StateRevoked, m, nil, nil, now)
	t.Logf("m1: %s — %s", w.Badge, w.Since)
	if m.RevokedBy != "user:alice" {
		t.Fatalf("m1 revoked_by %q after the restore; its words: %q", m.RevokedBy, w.Since)
	}
}
