package store

import (
	"context"
	"fmt"
)

// groupMost bounds the writes one transaction takes from the queue: the
// others wait for it, and so does every other writer of SQLite.
const groupMost = 64

// groupedWrite is a write waiting for a turn that commits it (writeGrouped).
type groupedWrite struct {
	ctx  context.Context // its caller's: a write whose caller gave up is not run
	fn   func(tx *Tx) error
	err  error
	done chan struct{}
}

// writeGrouped runs fn in a write transaction it may share with the
// writes other callers queued meanwhile. On SQLite writers take turns
// anyway; the writer whose turn comes commits every write queued by then
// (at most groupMost), each in a savepoint of its own, so that one's error
// rolls back only its own part and reaches only its caller. A host's
// report was a transaction of four statements whose begin and commit cost
// a third of it (BenchmarkInsertReport_500), and the reports of a fleet
// arrive together after every change. A write whose turn finds no other
// waiting runs as write runs it. A write whose caller's context ended
// while it waited is not run (the host sends its report again); once
// shared, the transaction is not ended by one caller's context. On
// PostgreSQL, where writers run side by side and a deadlock's victim runs
// again from the start, it is write.
func (s *Store) writeGrouped(ctx context.Context, fn func(tx *Tx) error) error {
	if s.dialect != SQLite {
		return s.write(ctx, fn)
	}
	w := &groupedWrite{ctx: ctx, fn: fn, done: make(chan struct{})}
	s.gmu.Lock()
	s.queued = append(s.queued, w)
	s.gmu.Unlock()
	s.wmu.Lock()
	s.gmu.Lock()
	n := min(len(s.queued), groupMost)
	batch := append([]*groupedWrite(nil), s.queued[:n]...)
	clear(s.queued[:n]) // the backing array holds no finished write
	s.queued = s.queued[n:]
	s.gmu.Unlock()
	if n == 0 {
		// An earlier turn took w with its own.
		s.wmu.Unlock()
		<-w.done
		return w.err
	}
	func() {
		defer s.wmu.Unlock() // a write that panics leaves SQLite's turn to the next
		s.commitGroup(context.WithoutCancel(ctx), batch)
	}()
	<-w.done // in batch, or taken by an earlier turn
	return w.err
}

// commitGroup runs batch's writes in one transaction, holding SQLite's
// turn, and tells each its own outcome.
func (s *Store) commitGroup(ctx context.Context, batch []*groupedWrite) {
	finished := false
	defer func() {
		if !finished {
			// A write panicked: the transaction rolled back, and no
			// write of the batch is left waiting for ever.
			for _, w := range batch {
				if w.err == nil {
					w.err = fmt.Errorf("store: a write grouped with this one failed; nothing of either was stored")
				}
				close(w.done)
			}
		}
	}()
	var live []*groupedWrite
	for _, w := range batch {
		if err := w.ctx.Err(); err != nil {
			w.err = mapErr(err)
			continue
		}
		live = append(live, w)
	}
	var err error
	switch len(live) {
	case 0:
	case 1:
		err = s.writeLocked(live[0].ctx, live[0].fn)
		live[0].err = err
	default:
		err = s.writeLocked(ctx, func(tx *Tx) error {
			for _, w := range live {
				w.err = nil
				bumps, revoked := len(tx.bumps), len(tx.revoked)
				if err := tx.execDirect("SAVEPOINT grouped"); err != nil {
					return err
				}
				if w.err = w.fn(tx); w.err != nil {
					w.err = mapErr(w.err)
					if err := tx.execDirect("ROLLBACK TO grouped"); err != nil {
						// SQLite ended the whole transaction itself (a
						// full disk, say): the write's own error says why.
						return w.err
					}
					tx.bumps, tx.revoked = tx.bumps[:min(bumps, len(tx.bumps))], tx.revoked[:min(revoked, len(tx.revoked))]
				}
				if err := tx.execDirect("RELEASE grouped"); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, w := range live {
		if err != nil && w.err == nil {
			w.err = err // the transaction itself failed: none was stored
		}
	}
	for _, w := range batch {
		close(w.done)
	}
	finished = true
}
