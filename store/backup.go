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
	// People are the people carried from the replaced store (password,
	// role, disabled, as they were there); Disabled those only the backup
	// has, disabled (removed since it was taken).
	People   int
	Disabled []string
	// Unread, when not empty, is why the replaced store could not be read:
	// nothing was carried from it.
	Unread string
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
	if fi, err := os.Stat(backupPath + "-wal"); err == nil && fi.Size() > 0 {
		// A store's own file, not a backup: its log holds what the file
		// alone lacks.
		return nil, fmt.Errorf("%s has a write-ahead log beside it (%s): it is a store's file, not a backup, and alone it lacks what the log holds; make a backup of that store with 'mesh-controller backup' and restore that", backupPath, backupPath+"-wal")
	}
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
		// What the replaced store says of revocations and people is newer
		// than the backup: carried over, so no revocation, disabling or
		// new password is undone. A store that cannot be read (the reason
		// to restore, often) is still moved aside, and the result says
		// nothing could be carried.
		rs, people, err := readReplaced(ctx, dataDir)
		if err != nil {
			out.Unread = err.Error()
		} else {
			if err := restored.carryRevocations(ctx, rs, out); err != nil {
				return nil, fmt.Errorf("carrying the revocations into the restored store: %w", err)
			}
			if err := restored.carryPeople(ctx, people, out); err != nil {
				return nil, fmt.Errorf("carrying the people into the restored store: %w", err)
			}
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
		// A name no earlier restore took: a rename onto one would lose it.
		base := current + ".before-restore-" + now.UTC().Format("20060102T150405Z")
		out.Kept = base
		for i := 2; ; i++ {
			if _, err := os.Lstat(out.Kept); errors.Is(err, os.ErrNotExist) {
				break
			}
			out.Kept = fmt.Sprintf("%s-%d", base, i)
		}
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

// readReplaced reads the revocations in force and the people of the store
// in dataDir, which Restore is about to replace.
func readReplaced(ctx context.Context, dataDir string) ([]models.Revocation, []models.User, error) {
	old, err := Open(ctx, Config{DataDir: dataDir})
	if err != nil {
		return nil, nil, err
	}
	defer old.Close()
	rs, err := old.Revocations(ctx)
	if err != nil {
		return nil, nil, err
	}
	var people []models.User
	if err := old.db.WithContext(ctx).Find(&people).Error; err != nil {
		return nil, nil, err
	}
	return rs, people, nil
}

// carryPeople makes the restored store's people those of the replaced one:
// each one's password, role and disabling as they were there (a password
// changed after a leak, or a person disabled, since the backup stays so),
// and a person only the backup has (removed since) disabled.
func (s *Store) carryPeople(ctx context.Context, people []models.User, out *Restored) error {
	return s.write(ctx, func(tx *Tx) error {
		now := tx.s.Now()
		kept := map[string]bool{}
		for _, u := range people {
			kept[u.Name] = true
			res := tx.Model(&models.User{}).Where("name = ?", u.Name).Updates(map[string]any{
				"role": u.Role, "password_hash": u.PasswordHash, "disabled_at": u.DisabledAt, "disabled_by": u.DisabledBy})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				nu := models.User{Name: u.Name, Role: u.Role, PasswordHash: u.PasswordHash, CreatedAt: u.CreatedAt, DisabledAt: u.DisabledAt, DisabledBy: u.DisabledBy}
				if err := tx.Create(&nu).Error; err != nil {
					return err
				}
			}
			out.People++
		}
		var restored []models.User
		if err := tx.Find(&restored).Error; err != nil {
			return err
		}
		for _, u := range restored {
			if kept[u.Name] || u.DisabledAt != nil {
				continue
			}
			if err := tx.Model(&models.User{}).Where("name = ?", u.Name).
				Updates(map[string]any{"disabled_at": now, "disabled_by": "restore"}).Error; err != nil {
				return err
			}
			out.Disabled = append(out.Disabled, u.Name)
			if err := audit(tx, "controller", "update-user", "user/"+u.Name, "disabled: not in the store a restore replaced"); err != nil {
				return err
			}
		}
		return nil
	})
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
