package store

import (
	"context"
	"sync/atomic"
	"time"
)

// SQLite copies its write-ahead log back into the database file (a
// checkpoint) in the commit that takes the log past wal_autocheckpoint
// pages (1,000 by default): that commit, still holding the write lock,
// copies the pages and syncs both files while every other writer waits.
// A fan-out's declarations and send rows passed 1,000 pages every few
// chunks, so a chunk in every few stalled the others behind a copy and
// two syncs (BenchmarkCompose_Batch500 on SQLite: 35 → 25 ms of wall
// time a chunk without it). The store checkpoints instead from a goroutine
// of its own, PASSIVE (it never blocks a reader or a writer), once writes
// have paused for checkpointQuiet, or at the latest checkpointMax after
// the first write it has not checkpointed. SQLite's own stays at
// walBackstop pages for what does not pass through Store.write and for
// bursts longer than that.
//
// Durability is what it was: with synchronous=NORMAL a commit survives
// the process's crash at once and a power loss once a checkpoint has
// synced the log, which now comes within checkpointMax of a write rather
// than after 1,000 pages of them.

const (
	checkpointQuiet = 200 * time.Millisecond
	checkpointMax   = 2 * time.Second
	// walBackstop is SQLite's own wal_autocheckpoint, in pages (~40 MiB).
	walBackstop = 10000
)

// checkpointer runs the SQLite store's checkpoints.
type checkpointer struct {
	wrote  chan struct{} // a write committed; buffered, one is enough
	quiet  time.Duration
	max    time.Duration
	cancel context.CancelFunc
	done   chan struct{}
	runs   atomic.Int64 // checkpoints that ran to the end of the log
}

// startCheckpointer starts s's checkpointer; Close stops it.
func (s *Store) startCheckpointer(quiet, most time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{wrote: make(chan struct{}, 1), quiet: quiet, max: most, cancel: cancel, done: make(chan struct{})}
	s.ckpt = c
	go s.checkpoints(ctx, c)
}

// wroteNow tells the checkpointer a write committed.
func (c *checkpointer) wroteNow() {
	if c == nil {
		return
	}
	select {
	case c.wrote <- struct{}{}:
	default:
	}
}

// stop ends the checkpointer and waits for it.
func (c *checkpointer) stop() {
	if c == nil {
		return
	}
	c.cancel()
	<-c.done
}

func (s *Store) checkpoints(ctx context.Context, c *checkpointer) {
	defer close(c.done)
	quiet, most := time.NewTimer(c.quiet), time.NewTimer(c.max)
	quiet.Stop()
	most.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wrote:
		}
		quiet.Reset(c.quiet)
		most.Reset(c.max)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.wrote:
				quiet.Reset(c.quiet)
			case <-quiet.C:
				break wait
			case <-most.C:
				break wait
			}
		}
		quiet.Stop()
		most.Stop()
		s.checkpoint(ctx, c)
	}
}

// checkpoint copies what it can of the log into the database file. It
// goes past gorm: it is the engine's upkeep, not a statement of any path
// the store counts. A checkpoint that cannot finish (a reader still on an
// older snapshot) loses nothing; the next write asks again.
func (s *Store) checkpoint(ctx context.Context, c *checkpointer) {
	sqlDB, err := s.db.DB()
	if err != nil {
		return
	}
	var busy, log, copied int
	if err := sqlDB.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &copied); err != nil {
		return
	}
	if busy == 0 && copied == log {
		c.runs.Add(1)
	}
}
