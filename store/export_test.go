package store

import "context"

// Write runs fn as the store's own writes do (tests).
func (s *Store) Write(ctx context.Context, fn func(tx *Tx) error) error { return s.write(ctx, fn) }
