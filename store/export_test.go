package store

import (
	"context"
	"fmt"
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
