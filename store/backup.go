package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gofrs/flock"
	"gorm.io/gorm/clause"

	"mesh/models"
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

// Restored is what Restore did.
type Restored struct {
	// Kept is where the store it replaced was moved (empty: there was none).
	Kept string
	// Schema is the restored store's schema.
	Schema int64
	// Revocations are those of the replaced store carried into the
	// restored one; Machines the machines they revoke (state revoked
	// again); Users the people whose tokens they refuse.
	Revocations int
	Machines    []string
	Users       []string
}

// Restore puts an SQLite backup (Backup's file) in place as dataDir's
// store, with no controller serving it (its lock is taken, so one that
// starts meanwhile waits for nothing: it refuses). Nothing is lost: the
// store it replaces, with its write-ahead log, is moved aside, named in
// the result. A revocation is never undone by a restore: every revocation
// in force in the replaced store (a machine revoked, a user disabled, an
// API token or session revoked, a certificate spent since the backup) is
// carried into the restored one — a backup from before it would otherwise
// let the revoked credential in again.
func Restore(ctx context.Context, dataDir, backupPath string, now time.Time) (*Restored, error) {
	lock := flock.New(filepath.Join(dataDir, "controller.lock"))
	ok, err := lock.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("a controller serves %s (it holds %s): stop it first", dataDir, lock.Path())
	}
	defer func() { _ = lock.Unlock() }()

	// The backup is copied and checked where it cannot be taken for the
	// store until it is complete.
	tmp, err := os.MkdirTemp(dataDir, ".restore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := copyFile(backupPath, filepath.Join(tmp, "mesh.db")); err != nil {
		return nil, err
	}
	restored, err := Open(ctx, Config{DataDir: tmp})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", backupPath, err)
	}
	open := true
	defer func() {
		if open {
			restored.Close()
		}
	}()
	out := &Restored{}
	if out.Schema, _, err = restored.SchemaVersion(ctx); err != nil || out.Schema == 0 {
		return nil, fmt.Errorf("%s is not a mesh store (no schema version): %v", backupPath, err)
	}

	current := filepath.Join(dataDir, "mesh.db")
	if _, err := os.Stat(current); err == nil {
		old, err := Open(ctx, Config{DataDir: dataDir})
		if err != nil {
			return nil, fmt.Errorf("the store to replace: %w", err)
		}
		rs, err := old.Revocations(ctx)
		old.Close()
		if err != nil {
			return nil, fmt.Errorf("the store to replace: its revocations: %w", err)
		}
		if err := restored.carryRevocations(ctx, rs, out); err != nil {
			return nil, fmt.Errorf("carrying the revocations into the restored store: %w", err)
		}
	}
	// Its log is folded into the file, which then stands alone.
	if err := restored.db.WithContext(ctx).Exec("PRAGMA wal_checkpoint(TRUNCATE)").Error; err != nil {
		return nil, err
	}
	open = false
	if err := restored.Close(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(current); err == nil {
		out.Kept = current + ".before-restore-" + now.UTC().Format("20060102T150405Z")
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Rename(current+suffix, out.Kept+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	if err := os.Rename(filepath.Join(tmp, "mesh.db"), current); err != nil {
		return nil, err
	}
	return out, nil
}

// carryRevocations writes rs into s (those it has already left as they
// are), and marks the machines whose enrolment they revoke revoked.
func (s *Store) carryRevocations(ctx context.Context, rs []models.Revocation, out *Restored) error {
	return s.write(ctx, func(tx *Tx) error {
		for i := range rs {
			r := rs[i]
			res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&r)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				continue
			}
			out.Revocations++
			if user, _, ok := models.ParseUserRevocationID(r.TokenID); ok && !slices.Contains(out.Users, user) {
				out.Users = append(out.Users, user)
			}
			if r.Kind != models.RevokedMachine {
				continue
			}
			var m models.Machine
			if err := tx.Where("token_id = ? AND revoked_at IS NULL", r.TokenID).Limit(1).Find(&m).Error; err != nil {
				return err
			}
			if m.ID == 0 {
				continue
			}
			if err := tx.Model(&m).Updates(map[string]any{"revoked_at": r.RevokedAt, "revoked_reason": r.Reason}).Error; err != nil {
				return err
			}
			out.Machines = append(out.Machines, m.Name)
			if err := audit(tx, "controller", "revoke-machine", "machine/"+m.Name, "carried into a restored store: "+r.Reason); err != nil {
				return err
			}
		}
		return nil
	})
}

// copyFile copies src to a new file dst (mode 0600), synced.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
