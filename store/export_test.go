package store

import (
	"context"
	"fmt"
	"time"

	"mesh/models"
)

// MigrateTo applies the migrations up to and including version: tests
// that store rows as an older schema held them, then migrate the rest.
func (s *Store) MigrateTo(ctx context.Context, version int64) error {
	p, err := s.gooseProvider()
	if err != nil {
		return err
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrate to %d: %w", version, err)
	}
	return nil
}

// MapErr is mapErr, for tests of errors no test can provoke for real.
var MapErr = mapErr

// SetBeforeStore sets a function run between a compose chunk's snapshot
// and its insert (nil: none).
func (s *Store) SetBeforeStore(f func()) { s.beforeStore = f }

// SetBeforeReportWrite sets a function run between a report's read and
// its write, told whether the report is stored at once (nil: none).
func (s *Store) SetBeforeReportWrite(f func(atOnce bool)) { s.beforeReportWrite = f }

// ReadForCompose runs the machine, variable and assignment reads of a
// compose batch in one snapshot, by gorm's Find (byGorm) or by the direct
// scans composing uses: the benchmark of that lever compares the two.
func (s *Store) ReadForCompose(ctx context.Context, ids []int64, byGorm bool) (int, error) {
	n := 0
	err := s.snapshot(ctx, func(tx *Tx) error {
		if byGorm {
			var ms []models.Machine
			var vs []models.MachineVariable
			var as []models.Assignment
			if err := tx.Select("id", "name", "os", "arch", "generation", "generation_trigger", "empty_ok",
				"target_host_version", "running", "conflict", "host_version", "schema", "applied_generation",
				"held_back").Where("id IN ?", ids).Order("id").Find(&ms).Error; err != nil {
				return err
			}
			if err := tx.Where("machine_id IN ?", ids).Find(&vs).Error; err != nil {
				return err
			}
			if err := tx.Where("machine_id IN ?", ids).Find(&as).Error; err != nil {
				return err
			}
			n = len(ms) + len(vs) + len(as)
			return nil
		}
		ms, err := composeMachines(tx, ids)
		if err != nil {
			return err
		}
		vs, err := composeVariables(tx, ids)
		if err != nil {
			return err
		}
		as, err := composeAssignments(tx, ids)
		if err != nil {
			return err
		}
		for _, v := range vs {
			n += len(v)
		}
		n += len(ms) + len(as)
		return nil
	})
	return n, err
}

// SetIDsAsList makes the snapshot read pass id lists as a parameter a
// value (true) or as one parameter (false, the default), for the
// benchmark that compares them.
func SetIDsAsList(v bool) { idsAsList = v }

// CancelThenCopy runs a write that ends its own context, then reaches the
// transaction's connection n times (as copyRows does) and copies a send
// row in.
func (s *Store) CancelThenCopy(ctx context.Context, n int, snd models.Send) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return s.write(ctx, func(tx *Tx) error {
		cancel()
		for range n {
			if err := tx.conn.Raw(func(any) error { return nil }); err != nil {
				return err
			}
		}
		return insertSendsIn(tx, []models.Send{snd})
	})
}

// RestartCheckpointer runs the SQLite checkpointer again with these
// pauses (checkpoint.go); no write may run meanwhile.
func (s *Store) RestartCheckpointer(quiet, most time.Duration) error {
	s.ckpt.stop()
	return s.startCheckpointer(s.dsn, quiet, most)
}

// Checkpoints is how many of the checkpointer's checkpoints reached the
// end of the log.
func (s *Store) Checkpoints() int64 { return s.ckpt.runs.Load() }

// HoldWrites takes SQLite's write turn until release is called, so that
// grouped writes queue behind it.
func (s *Store) HoldWrites() (release func()) {
	s.wmu.Lock()
	return s.wmu.Unlock
}

// Queued is how many grouped writes wait for a turn.
func (s *Store) Queued() int {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	return len(s.queued)
}

// WriteGrouped is writeGrouped, for tests of what grouping does with a
// write of any kind.
func (s *Store) WriteGrouped(ctx context.Context, fn func(tx *Tx) error) error {
	return s.writeGrouped(ctx, fn)
}
