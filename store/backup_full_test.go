package store

import (
	"database/sql"
	"path/filepath"
	"strings"
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
