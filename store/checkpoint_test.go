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

// TestCheckpoint_OffTheWritePath: SQLite's log is copied back into the
// database file by the checkpointer once writes pause, not by the commit
// that takes it past 1,000 pages (SQLite's own checkpoint, run there with
// the write lock held, stalled every other writer of a fan-out). SQLite
// only: on PostgreSQL the server keeps its own log.
func TestCheckpoint_OffTheWritePath(t *testing.T) {
	ctx := context.Background()
	s, cfg := openSQLite(t)
	// No checkpoint of the checkpointer's while the writes run, however
	// slowly they come: what the log holds after them is the commits' doing.
	if err := s.RestartCheckpointer(time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	const writes = 40 // ~10 MiB: ~2,500 pages of 4 KiB
	writeSettings(t, s, writes)
	wal, err := os.Stat(filepath.Join(cfg.DataDir, "mesh.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	// A commit that checkpointed at 1,000 pages would have begun the log
	// again from its start: it would hold ~1,000 pages and one write's.
	if wal.Size() < 2000*4096 {
		t.Fatalf("the log holds %d bytes after %d writes of 256 KiB: a commit checkpointed it", wal.Size(), writes)
	}

	if err := s.RestartCheckpointer(20*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, func(tx *store.Tx) error {
		return tx.Exec("UPDATE settings SET value = ? WHERE key = ?", "y", "k00").Error
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.Checkpoints() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("writes paused and the checkpointer did not checkpoint the log")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Checkpointed to its end, the log begins again with the next write.
	if err := s.Write(ctx, func(tx *store.Tx) error {
		return tx.Exec("UPDATE settings SET value = ? WHERE key = ?", "z", "k01").Error
	}); err != nil {
		t.Fatal(err)
	}
	var busy, log, copied int
	if err := s.DB().Raw("PRAGMA wal_checkpoint(PASSIVE)").Row().Scan(&busy, &log, &copied); err != nil {
		t.Fatal(err)
	}
	if busy != 0 || log > 100 {
		t.Fatalf("after the checkpointer's checkpoint and one small write: busy %d, the log holds %d pages", busy, log)
	}
	for i := range writes {
		var n int64
		if err := s.DB().Raw("SELECT count(*) FROM settings WHERE key = ?", fmt.Sprintf("k%02d", i)).Scan(&n).Error; err != nil || n != 1 {
			t.Fatalf("setting k%02d: %d rows, %v", i, n, err)
		}
	}
}

// TestCheckpoint_WhileWritesGoOn: under writes that never pause, the
// checkpointer still copies the log to its end (the last of it with the
// writers held off), so it begins again from its start rather than
// growing until SQLite's backstop copies thousands of pages inside a
// commit while every writer waits. The writes go on until it has, however
// fast this machine writes, up to a bound under the backstop.
func TestCheckpoint_WhileWritesGoOn(t *testing.T) {
	s, _ := openSQLite(t)
	if err := s.RestartCheckpointer(time.Hour, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	const most = 120 // 30 MiB: ~8,000 pages, under the backstop's 10,000
	n := 0
	for ; n < most && s.Checkpoints() == 0; n++ {
		writeSetting(t, s, n)
	}
	if s.Checkpoints() == 0 {
		t.Fatalf("%d writes of 256 KiB, and no checkpoint copied the log to its end while they went on", n)
	}
	for range 10 {
		writeSetting(t, s, n)
		n++
	}
	var busy, log, copied int
	if err := s.DB().Raw("PRAGMA wal_checkpoint(PASSIVE)").Row().Scan(&busy, &log, &copied); err != nil {
		t.Fatal(err)
	}
	// A write is 64 pages of 4 KiB and a few more: a log that never began
	// again holds more than 64 for every write; one that began again after
	// the checkpoint holds the writes since.
	if log >= n*64 {
		t.Fatalf("the log holds %d pages after %d writes of 256 KiB: it never began again", log, n)
	}
}

// openSQLite opens and migrates a SQLite store, and says where it is.
func openSQLite(t *testing.T) (*store.Store, store.Config) {
	t.Helper()
	cfg := storetest.Config(t, store.SQLite)
	return storetest.MustOpenConfig(t, cfg), cfg
}

// writeSettings writes n settings k00, k01, … of 256 KiB, each in a write
// of its own, back to back.
func writeSettings(t *testing.T, s *store.Store, n int) {
	t.Helper()
	for i := range n {
		writeSetting(t, s, i)
	}
}

// writeSetting writes setting k<i>, 256 KiB of it.
func writeSetting(t *testing.T, s *store.Store, i int) {
	t.Helper()
	value := strings.Repeat("x", 256<<10)
	if err := s.Write(context.Background(), func(tx *store.Tx) error {
		return tx.Exec("INSERT INTO settings (key, value) VALUES (?, ?)", fmt.Sprintf("k%02d", i), value).Error
	}); err != nil {
		t.Fatal(err)
	}
}
