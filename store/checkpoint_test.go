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
	cfg := storetest.Config(t, store.SQLite)
	s, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// No checkpoint of the checkpointer's while the writes run, however
	// slowly they come: what the log holds after them is the commits' doing.
	s.RestartCheckpointer(time.Hour, time.Hour)
	value := strings.Repeat("x", 256<<10)
	const writes = 40 // ~10 MiB: ~2,500 pages of 4 KiB
	for i := range writes {
		if err := s.Write(ctx, func(tx *store.Tx) error {
			return tx.Exec("INSERT INTO settings (key, value) VALUES (?, ?)", fmt.Sprintf("k%02d", i), value).Error
		}); err != nil {
			t.Fatal(err)
		}
	}
	wal, err := os.Stat(filepath.Join(cfg.DataDir, "mesh.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	// A commit that checkpointed at 1,000 pages would have begun the log
	// again from its start: it would hold ~1,000 pages and one write's.
	if wal.Size() < 2000*4096 {
		t.Fatalf("the log holds %d bytes after %d writes of 256 KiB: a commit checkpointed it", wal.Size(), writes)
	}

	s.RestartCheckpointer(20*time.Millisecond, time.Hour)
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
	if log > 100 {
		t.Fatalf("after the checkpointer's checkpoint and one small write the log holds %d pages", log)
	}
	for i := range writes {
		var n int64
		if err := s.DB().Raw("SELECT count(*) FROM settings WHERE key = ?", fmt.Sprintf("k%02d", i)).Scan(&n).Error; err != nil || n != 1 {
			t.Fatalf("setting k%02d: %d rows, %v", i, n, err)
		}
	}
}
