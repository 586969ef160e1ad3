package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/store"
	"mesh/store/storetest"
)

// TestRestore_ATruncatedBackupIsRefused: a backup cut short in its last
// page (a copy interrupted, a download that stopped part way) opened,
// migrated and was restored: a corrupt store put where a controller serves
// it, its damage met only by the statements that touch it. It is refused
// now, and the store it would have replaced stays in place.
func TestRestore_ATruncatedBackupIsRefused(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.SQLite)
	s := storetest.MustOpenConfig(t, cfg)
	served(t, s)
	for _, n := range []string{"m1", "m2", "m3"} {
		fixture(t, s, n)
	}
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.db")
	if err := os.WriteFile(cut, b[:len(b)-1000], 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := store.Restore(ctx, cfg.DataDir, cut, time.Now())
	r, oerr := store.Open(ctx, cfg)
	if oerr != nil {
		t.Fatal(oerr)
	}
	defer r.Close()
	var ok string
	if e := r.DB().Raw("PRAGMA integrity_check").Scan(&ok).Error; e != nil || ok != "ok" || err == nil || !strings.Contains(err.Error(), "is damaged") {
		t.Fatalf("a backup cut 1000 bytes short: restore said %+v, %v; the data dir's store now: integrity_check %q %v", out, err, ok, e)
	}
}

// TestRestore_ANewerSchemasBackupIsRefused: a backup of a store a newer
// build had migrated was restored by this build, which cannot know what
// that schema holds that must be carried (a revocation or credential kept
// where only the newer build looks), nor bring the backup to its schema.
// It is refused now, naming the schemas, and the current store stays.
func TestRestore_ANewerSchemasBackupIsRefused(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.SQLite)
	s := storetest.MustOpenConfig(t, cfg)
	served(t, s)
	fixture(t, s, "m1")
	_, known, err := s.SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The store as a newer build migrated it (written as goose records it,
	// as TestBehind_OnceTheStoreIsMigratedUnderIt does), backed up, and
	// the data dir's store then put back to this build's schema.
	if err := s.DB().Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, true)`, known+1).Error; err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Exec(`DELETE FROM goose_db_version WHERE version_id = ?`, known+1).Error; err != nil {
		t.Fatal(err)
	}
	s.Close()
	out, err := store.Restore(ctx, cfg.DataDir, backup, time.Now())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at store schema %d, this build knows %d", known+1, known)) {
		t.Fatalf("a backup at schema %d (this build knows %d): restored %+v, %v", known+1, known, out, err)
	}
	r, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if m, err := r.Machine(ctx, "m1"); err != nil || m == nil {
		t.Fatalf("the store a refused restore would have replaced: %v", err)
	}
}

// TestRestore_WhatIsNoBackupIsSaidSo: an empty file or a SQLite file of
// something else was refused "(no schema version): <nil>"; a directory
// with the name of a temporary file of the restore's own; a backup to an
// empty path with a word about the working directory. Each says what it
// is now, and the store in place stays.
func TestRestore_WhatIsNoBackupIsSaidSo(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.SQLite)
	s := storetest.MustOpenConfig(t, cfg)
	served(t, s)
	fixture(t, s, "m1")
	if err := s.Backup(ctx, ""); err == nil || !strings.Contains(err.Error(), "name one") {
		t.Errorf("a backup to an empty path: %v", err)
	}
	s.Close()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{empty: "holds no schema version", dir: "is not a file"} {
		_, err := store.Restore(ctx, cfg.DataDir, path, time.Now())
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "<nil>") || strings.Contains(err.Error(), ".restore-") {
			t.Errorf("restore of %s: %v, want it to say it %s", path, err, want)
		}
	}
	r := storetest.MustOpenConfig(t, cfg)
	if _, err := r.Machine(ctx, "m1"); err != nil {
		t.Fatalf("the store in place after refused restores: %v", err)
	}
}
