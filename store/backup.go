package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
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
	if path == "" {
		return errors.New("a backup is written to a file: name one (mesh-controller backup FILE)")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err == nil {
		return fmt.Errorf("%s exists: a backup is written to a new file", abs)
	}
	// Written beside it under a name of its own, then given its name
	// whole: stopped part way (Ctrl-C, a timeout, a unit stopped, a full
	// disk) it left a file under the name asked for, sized like a backup,
	// that a rotation could keep in place of a good one. Made empty and
	// private first: VACUUM INTO writes into it with the mode it finds.
	dir, base := filepath.Split(abs)
	f, err := os.CreateTemp(dir, "."+base+".partial-*")
	if err != nil {
		return err
	}
	partial := f.Name()
	f.Close()
	drop := func() {
		os.Remove(partial)
		os.Remove(partial + "-journal")
	}
	if err := s.db.WithContext(ctx).Exec("VACUUM INTO ?", partial).Error; err != nil {
		drop()
		return backupFailed(abs, err)
	}
	if err := syncPath(partial); err != nil {
		drop()
		return fmt.Errorf("backup to %s: %w", abs, err)
	}
	if err := placeNew(partial, abs); err != nil {
		drop()
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: a backup is written to a new file", abs)
		}
		return fmt.Errorf("backup to %s: %w", abs, err)
	}
	drop()
	return syncPath(dir)
}

// link puts a file under a second name (os.Link; a test stands in for a
// filesystem without hard links).
var link = os.Link

// placeNew gives the file at from the name to, never replacing a file made
// under it meanwhile: a hard link, or on a filesystem without them (FAT and
// exFAT, many SMB mounts: a backup disk), a rename that refuses to replace
// (RENAME_NOREPLACE), else a rename after a look. from is left for the
// caller to remove.
func placeNew(from, to string) error {
	err := link(from, to)
	if err == nil || errors.Is(err, os.ErrExist) {
		return err
	}
	err = unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EEXIST) {
		return os.ErrExist
	}
	if _, serr := os.Lstat(to); serr == nil {
		return os.ErrExist
	}
	return os.Rename(from, to)
}

// backupFailed says why a backup's copy failed. A full disk is the
// backup's: it was said "the store is out of disk space: nothing was
// stored", sending the operator to the store's disk, which had room.
func backupFailed(abs string, err error) error {
	if errors.Is(mapErr(err), models.ErrStorageFull) {
		return fmt.Errorf("backup to %s: its disk is full: no backup was written; the store is untouched (%v)", abs, err)
	}
	return fmt.Errorf("backup to %s: %w", abs, mapErr(err))
}

// syncPath flushes a file or a directory (its entries) to disk.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
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
	// APITokens are the API tokens made since the backup, carried so that
	// they are listed and can be revoked.
	APITokens int
	// JoinTokens are the join tokens the replaced store had spent or
	// revoked since the backup, so in the restored one.
	JoinTokens int
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
	// A file: the copy below named its own temporary file when the backup
	// was a directory.
	switch fi, err := os.Stat(backupPath); {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a file: a backup is the file 'mesh-controller backup FILE' wrote", backupPath)
	}
	if fi, err := os.Stat(backupPath + "-wal"); err == nil && fi.Size() > 0 {
		// A store's own file, not a backup: its log holds what the file
		// alone lacks.
		return nil, fmt.Errorf("%s has a write-ahead log beside it (%s): it is a store's file, not a backup, and alone it lacks what the log holds; make a backup of that store with 'mesh-controller backup' and restore that", backupPath, backupPath+"-wal")
	}
	lockPath := filepath.Join(dataDir, "controller.lock")
	_, lockErr := os.Stat(lockPath)
	lock := flock.New(lockPath)
	ok, err := lock.TryLock()
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("a controller serves %s (it holds %s): stop it first", dataDir, lock.Path())
	}
	defer func() { _ = lock.Unlock() }()
	if lockErr != nil {
		// Made here (as root, say): the controller's user must open it.
		if err := ownLike(lockPath, dataDir); err != nil {
			return nil, err
		}
	}

	// A restore cut short (a signal mid-copy) left its copy: the lock says
	// none runs now.
	if stale, err := filepath.Glob(filepath.Join(dataDir, ".restore-*")); err == nil {
		for _, d := range stale {
			_ = os.RemoveAll(d)
		}
	}
	// The backup is copied and checked where it cannot be taken for the
	// store until it is complete.
	tmp, err := os.MkdirTemp(dataDir, ".restore-")
	if err != nil {
		return nil, err
	}
	keepTmp := false
	defer func() {
		if !keepTmp {
			os.RemoveAll(tmp)
		}
	}()
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
	// Every page read once: a backup cut short in its last page (a copy or
	// download interrupted) opened and migrated, and was served, its
	// damage met only by the statements that touch it.
	var damage []string
	if err := restored.db.WithContext(ctx).Raw("PRAGMA integrity_check(5)").Scan(&damage).Error; err != nil {
		return nil, fmt.Errorf("%s is damaged (%v): not restored; the store in %s is unchanged", backupPath, err, dataDir)
	}
	if len(damage) != 1 || damage[0] != "ok" {
		return nil, fmt.Errorf("%s is damaged (%s): not restored; the store in %s is unchanged", backupPath, strings.Join(damage, "; "), dataDir)
	}
	out := &Restored{}
	var known int64
	if out.Schema, known, err = restored.SchemaVersion(ctx); err != nil || out.Schema == 0 {
		why := "it holds no schema version"
		if err != nil {
			why = err.Error()
		}
		return nil, fmt.Errorf("%s is not a mesh store (%s): not restored; the store in %s is unchanged", backupPath, why, dataDir)
	}
	if out.Schema > known {
		// This build cannot bring it to its schema, nor carry into it
		// what a newer schema keeps where only a newer build looks.
		return nil, fmt.Errorf("%s is at store schema %d, this build knows %d: restore it with the build that made it or a newer one; the store in %s is unchanged",
			backupPath, out.Schema, known, dataDir)
	}
	// Brought to this build's schema (as serving it would), so what is
	// carried into it has its columns whatever the backup's age.
	if _, err := restored.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", backupPath, err)
	}

	current := filepath.Join(dataDir, "mesh.db")
	if storeFiles(current) {
		// What the replaced store says of revocations, join tokens and
		// people is newer than the backup: carried over, so no revocation,
		// spent or revoked join token, disabling or new password is
		// undone — when it is the same mesh's store (a signing key in
		// common), not another's (a fresh controller's, started once on a
		// new machine). A store that cannot be read (the reason to
		// restore, often) is moved aside all the same, and the result
		// says nothing could be carried.
		rp, err := readReplaced(ctx, dataDir)
		switch {
		case err != nil:
			out.Unread = err.Error()
		case !restored.sharesAKey(ctx, rp.keys):
			out.Unread = "it is another mesh's store (no signing key in common with the backup)"
		default:
			if err := restored.carryRevocations(ctx, rp.revocations, out); err != nil {
				return nil, fmt.Errorf("carrying the revocations into the restored store: %w", err)
			}
			if err := restored.carryJoinTokens(ctx, rp.joinTokens, out); err != nil {
				return nil, fmt.Errorf("carrying the join tokens into the restored store: %w", err)
			}
			if err := restored.carryPeople(ctx, rp.people, out); err != nil {
				return nil, fmt.Errorf("carrying the people into the restored store: %w", err)
			}
			if err := restored.carryAPITokens(ctx, rp.apiTokens, out); err != nil {
				return nil, fmt.Errorf("carrying the API tokens into the restored store: %w", err)
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
	if storeFiles(current) {
		// A name no earlier restore took: a rename onto one would lose it.
		base := current + ".before-restore-" + now.UTC().Format("20060102T150405Z")
		out.Kept = base
		for i := 2; ; i++ {
			if _, err := os.Lstat(out.Kept); errors.Is(err, os.ErrNotExist) {
				break
			}
			out.Kept = fmt.Sprintf("%s-%d", base, i)
		}
		// The log first, the file last: stopped part way, what is left
		// is never a store's file beside another's log (SQLite would
		// replay it into the restored file).
		for _, suffix := range []string{"-shm", "-wal", ""} {
			if err := os.Rename(current+suffix, out.Kept+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("moving the replaced store aside (%s → %s): %w; the data dir holds what was not moved yet, and no store was put in place", current+suffix, out.Kept+suffix, err)
			}
		}
	}
	// Owned as the store it replaces (or the data dir) is: a restore run
	// as root for a controller that runs as its own user must leave a
	// store that user can open.
	if err := ownLike(filepath.Join(tmp, "mesh.db"), firstExisting(out.Kept, dataDir)); err != nil {
		return nil, err
	}
	if err := os.Rename(filepath.Join(tmp, "mesh.db"), current); err != nil {
		// The replaced store goes back, and the restored copy is kept:
		// the data dir is never left without a store.
		if out.Kept != "" {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				_ = os.Rename(out.Kept+suffix, current+suffix)
			}
		}
		keepTmp = true
		return nil, fmt.Errorf("putting the restored store in place: %w; the replaced store is back as it was, and the restored copy is kept in %s", err, tmp)
	}
	return out, nil
}

// firstExisting is the first of paths that exists ("" for none).
func firstExisting(paths ...string) string {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// ownLike gives path the owner and group of like, when they differ (and
// this process may: as root).
func ownLike(path, like string) error {
	if like == "" {
		return nil
	}
	want, err := os.Stat(like)
	if err != nil {
		return err
	}
	have, err := os.Stat(path)
	if err != nil {
		return err
	}
	w, ok1 := want.Sys().(*syscall.Stat_t)
	h, ok2 := have.Sys().(*syscall.Stat_t)
	if !ok1 || !ok2 || (w.Uid == h.Uid && w.Gid == h.Gid) {
		return nil
	}
	if err := os.Chown(path, int(w.Uid), int(w.Gid)); err != nil {
		return fmt.Errorf("the restored store is owned by %d:%d, the store it replaces by %d:%d, and changing it failed (%w): run restore as the controller's user", h.Uid, h.Gid, w.Uid, w.Gid, err)
	}
	return nil
}

// storeFiles says whether any of an SQLite store's files is at path (its
// file, its log, or the log's index): a log left alone is moved aside too.
func storeFiles(path string) bool {
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Lstat(path + suffix); err == nil {
			return true
		}
	}
	return false
}

// replaced is what Restore reads of the store it replaces.
type replaced struct {
	revocations []models.Revocation
	joinTokens  []models.JoinToken // spent or revoked
	people      []models.User
	apiTokens   []models.APIToken
	keys        [][]byte // public keys
}

// restoreSessionTTL bounds the logins of a person a restore disables (a
// login lasts 12 h; their API tokens' own expiry is taken too).
const restoreSessionTTL = 24 * time.Hour

// readReplaced reads the store in dataDir, which Restore is about to
// replace: its revocations in force, its spent or revoked join tokens,
// its people and its public keys.
func readReplaced(ctx context.Context, dataDir string) (*replaced, error) {
	if _, err := os.Stat(filepath.Join(dataDir, "mesh.db")); err != nil {
		return nil, err
	}
	old, err := Open(ctx, Config{DataDir: dataDir})
	if err != nil {
		return nil, err
	}
	defer old.Close()
	var r replaced
	if r.revocations, err = old.Revocations(ctx); err != nil {
		return nil, err
	}
	db := old.db.WithContext(ctx)
	if err := db.Where("used_at IS NOT NULL OR revoked_at IS NOT NULL").Find(&r.joinTokens).Error; err != nil {
		return nil, err
	}
	if err := db.Find(&r.people).Error; err != nil {
		return nil, err
	}
	if err := db.Find(&r.apiTokens).Error; err != nil {
		return nil, err
	}
	if err := db.Raw("SELECT public_key FROM keys").Scan(&r.keys).Error; err != nil {
		return nil, err
	}
	return &r, nil
}

// sharesAKey says whether s holds one of keys: the same mesh's store.
func (s *Store) sharesAKey(ctx context.Context, keys [][]byte) bool {
	var mine [][]byte
	if err := s.db.WithContext(ctx).Raw("SELECT public_key FROM keys").Scan(&mine).Error; err != nil {
		return false
	}
	for _, k := range keys {
		for _, m := range mine {
			if bytes.Equal(k, m) {
				return true
			}
		}
	}
	return false
}

// carryAPITokens makes the restored store's API tokens those of the
// replaced one: a token made since the backup is signed by the same key and
// works, so it must be listed and revocable by its id; one revoked since is
// listed revoked (its revocation, carried, refuses it).
func (s *Store) carryAPITokens(ctx context.Context, ts []models.APIToken, out *Restored) error {
	return s.write(ctx, func(tx *Tx) error {
		for i := range ts {
			t := ts[i]
			res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&t)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected > 0 {
				out.APITokens++
				continue
			}
			if t.RevokedAt != nil {
				if err := tx.Model(&models.APIToken{}).Where("id = ? AND revoked_at IS NULL", t.ID).
					Updates(map[string]any{"revoked_at": t.RevokedAt, "revoked_by": t.RevokedBy}).Error; err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// carryJoinTokens marks the join tokens the replaced store spent or
// revoked spent or revoked in s too: a token spent since the backup (its
// machine deleted since) or revoked since (leaked) enrols nothing again.
func (s *Store) carryJoinTokens(ctx context.Context, ts []models.JoinToken, out *Restored) error {
	return s.write(ctx, func(tx *Tx) error {
		for _, t := range ts {
			up := map[string]any{}
			if t.UsedAt != nil {
				up["used_at"], up["used_by"] = t.UsedAt, t.UsedBy
			}
			if t.RevokedAt != nil {
				up["revoked_at"], up["revoked_by"] = t.RevokedAt, t.RevokedBy
			}
			res := tx.Model(&models.JoinToken{}).Where("token_hash = ? AND used_at IS NULL AND revoked_at IS NULL", t.TokenHash).Updates(up)
			if res.Error != nil {
				return res.Error
			}
			out.JoinTokens += int(res.RowsAffected)
		}
		return nil
	})
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
			// As any disabling: every token they hold is refused too.
			if err := revokeUser(tx, "restore", u.Name, now, restoreSessionTTL, "not in the store a restore replaced"); err != nil {
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
			if err := tx.Model(&m).Updates(map[string]any{"revoked_at": r.RevokedAt, "revoked_reason": r.Reason, "revoked_by": r.RevokedBy}).Error; err != nil {
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
