package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"mesh/store"
	"mesh/store/storetest"
)

// TestBackup_ACopyThatOpens: a backup of a serving SQLite store is a
// database of its own (what the write-ahead log held included), private
// to its owner, that opens as a store with the same machines; a path that
// exists is refused, and a PostgreSQL store says to use its own tools.
func TestBackup_ACopyThatOpens(t *testing.T) {
	ctx := context.Background()
	s := storetest.MustOpen(t, store.SQLite)
	m := fixture(t, s, "m1")
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	if err := s.Backup(ctx, path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup: %v, mode %v; want 0600", err, fi.Mode())
	}
	if err := s.Backup(ctx, path); err == nil {
		t.Fatal("a backup over an existing file was written")
	}
	copied, err := store.Open(ctx, store.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Close()
	got, err := copied.Machine(ctx, "m1")
	if err != nil || got.ID != m.ID || got.Generation != m.Generation {
		t.Fatalf("the copy's m1: %+v, %v; want %+v", got, err, m)
	}
	if err := storetest.MustOpen(t, store.Postgres).Backup(ctx, filepath.Join(dir, "pg.db")); err == nil {
		t.Fatal("a PostgreSQL store backed up to a file")
	}
}
