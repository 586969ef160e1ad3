package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A backup whose disk filled was said "the store is out of disk space:
// nothing was stored", sending the operator to the store's disk, which
// had room. The error here is SQLite's own for a full database (a page
// limit standing in for the disk).
func TestBackup_AFullDiskIsTheBackups(t *testing.T) {
	c, err := newKeepingConnector("file:" + filepath.Join(t.TempDir(), "full.db"))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE t (b BLOB)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA max_page_count = 8"); err != nil {
		t.Fatal(err)
	}
	var full error
	for range 100 {
		if _, full = db.Exec("INSERT INTO t VALUES (randomblob(4096))"); full != nil {
			break
		}
	}
	if full == nil {
		t.Fatal("the database never filled")
	}
	got := backupFailed("/backups/mesh.db", full).Error()
	if strings.Contains(got, "the store is out of disk space") || !strings.Contains(got, "/backups/mesh.db: its disk is full") {
		t.Fatalf("a full backup disk is said: %s", got)
	}
}

// A backup onto a filesystem without hard links (FAT and exFAT, many SMB
// mounts: a USB disk, a NAS) was put in place by a link alone, which such a
// filesystem refuses: no backup was written there. It is renamed into
// place instead, never over a file made under its name meanwhile.
func TestBackup_OntoAFilesystemWithoutHardLinks(t *testing.T) {
	old := link
	link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
	defer func() { link = old }()
	s, err := Open(context.Background(), Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	if err := s.Backup(context.Background(), path); err != nil {
		t.Fatalf("backup where links are refused: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no backup at %s: %v", path, err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("beside the backup: %v", es)
	}
	// The name taken meanwhile: never replaced.
	other := filepath.Join(dir, "other.db")
	if err := os.WriteFile(other+".x", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := placeNew(other+".x", path); !errors.Is(err, os.ErrExist) {
		t.Fatalf("placed over an existing backup: %v", err)
	}
}
