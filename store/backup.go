package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Backup writes a consistent copy of an SQLite store to path, while
// controllers serve it: SQLite's VACUUM INTO reads one snapshot and writes
// a database of its own, with no write-ahead log beside it (the store's
// own file alone lacks whatever its log has not yet checkpointed). The
// copy holds the signing keys as the store does (encrypted only under
// --key-file), so it is made readable by its owner only. A PostgreSQL
// store is backed up with PostgreSQL's tools (pg_dump).
func (s *Store) Backup(ctx context.Context, path string) error {
	if s.dialect == Postgres {
		return errors.New("a PostgreSQL store is backed up with pg_dump (or the server's own backups), not here")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err == nil {
		return fmt.Errorf("%s exists: a backup is written to a new file", abs)
	}
	// Made first, empty and private: VACUUM INTO writes into it with the
	// mode it finds.
	f, err := os.OpenFile(abs, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	if err := s.db.WithContext(ctx).Exec("VACUUM INTO ?", abs).Error; err != nil {
		os.Remove(abs)
		return fmt.Errorf("backup to %s: %w", abs, mapErr(err))
	}
	return nil
}
