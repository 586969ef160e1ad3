package store

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"

	"github.com/libtnb/sqlite"
)

// SQLite copies its write-ahead log back into the database file (a
// checkpoint) right after the commit that takes the log past
// wal_autocheckpoint pages (1,000 by default), on the committing
// connection — inside Store.write, whose mutex every other writer waits
// on — copying the pages and syncing both files. A fan-out's declarations
// and send rows passed 1,000 pages every few chunks, so one chunk in every
// few stalled the others behind a copy and two syncs. The store
// checkpoints instead from a goroutine of its own, on a connection of its
// own, once writes have paused for checkpointQuiet or at the latest
// checkpointMax after the first write it has not checkpointed: first
// PASSIVE beside the writers (it never blocks a reader or a writer), which
// copies the bulk, then again holding the writers' mutex, which copies
// only what they added meanwhile, so that the log is copied to its end
// and the next write begins it again from its start (a log the writers
// keep adding to while it is copied never is, and would grow to the
// backstop). SQLite's own stays at walBackstop pages for what does not
// pass through Store.write, and journal_size_limit gives back the disk a
// burst took once the log begins again.
//
// Durability is what it was or better: with synchronous=NORMAL a commit
// survives the process's crash at once and a power loss once a
// checkpoint has synced the log, which now comes within checkpointMax of
// a write rather than after 1,000 pages of them.

const (
	checkpointQuiet = 200 * time.Millisecond
	checkpointMax   = 500 * time.Millisecond
	// walBackstop is SQLite's own wal_autocheckpoint, in pages (~40 MiB):
	// above the ~5,000 a 10,000-host fan-out writes.
	walBackstop = 10000
	// walKeep is the log's journal_size_limit, in bytes.
	walKeep = 16 << 20
)

// checkpointer runs the SQLite store's checkpoints.
type checkpointer struct {
	db     *sql.DB       // one connection of its own: a copy never holds one the store's work needs
	wrote  chan struct{} // a write committed; buffered, one is enough
	quiet  time.Duration
	max    time.Duration
	cancel context.CancelFunc
	done   chan struct{}
	runs   atomic.Int64 // checkpoints that copied the log to its end
}

// startCheckpointer starts s's checkpointer on a connection of its own to
// dsn; Close stops it.
func (s *Store) startCheckpointer(dsn string, quiet, most time.Duration) error {
	db, err := sql.Open(sqlite.DriverName, dsn)
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{db: db, wrote: make(chan struct{}, 1), quiet: quiet, max: most, cancel: cancel, done: make(chan struct{})}
	s.ckpt = c
	go s.checkpoints(ctx, c)
	return nil
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

// stop ends the checkpointer, waits for it and closes its connection.
func (c *checkpointer) stop() {
	if c == nil {
		return
	}
	c.cancel()
	<-c.done
	_ = c.db.Close()
}

// checkpoints waits for writes and checkpoints once they pause (quiet,
// set again by each write) or the first of them is max old (most, set by
// the first write after a checkpoint). A stopped timer delivers nothing.
func (s *Store) checkpoints(ctx context.Context, c *checkpointer) {
	defer close(c.done)
	quiet, most := time.NewTimer(c.quiet), time.NewTimer(c.max)
	quiet.Stop()
	most.Stop()
	waiting := false // a write not yet checkpointed
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wrote:
			quiet.Reset(c.quiet)
			if !waiting {
				most.Reset(c.max)
				waiting = true
			}
			continue
		case <-quiet.C:
		case <-most.C:
		}
		quiet.Stop()
		most.Stop()
		waiting = false
		s.checkpoint(ctx, c)
	}
}

// checkpoint copies the log into the database file: the bulk beside the
// writers, then the rest with them held off. It goes past gorm: it is the
// engine's upkeep, not a statement of any path the store counts. A
// checkpoint that cannot finish (a reader still on an older snapshot)
// loses nothing; the next write asks again.
func (s *Store) checkpoint(ctx context.Context, c *checkpointer) {
	if busy, _, _, err := c.passive(ctx); err != nil || busy {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if busy, log, copied, err := c.passive(ctx); err == nil && !busy && copied == log {
		c.runs.Add(1)
	}
}

// passive runs one PASSIVE checkpoint: whether it was kept from finishing,
// and the log's pages and how many of them are copied.
func (c *checkpointer) passive(ctx context.Context) (busy bool, log, copied int, err error) {
	var b int
	err = c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&b, &log, &copied)
	return b != 0, log, copied, err
}
