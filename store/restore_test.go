package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mesh/migrations"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// A join token revoked after the backup must stay unspendable after the
// restore: its revocation lives only on join_tokens.revoked_at, which
// Restore does not carry.
func TestRestore_JoinTokenRevokedSinceStaysRevoked(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.SQLite)
	s := storetest.MustOpenConfig(t, cfg)
	served(t, s)
	id, err := s.CreateLabelledJoinToken(ctx, "admin", "leaked-hash", time.Now().Add(7*24*time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeJoinToken(ctx, "admin", id); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := store.Restore(ctx, cfg.DataDir, backup, time.Now()); err != nil {
		t.Fatal(err)
	}
	r := storetest.MustOpenConfig(t, cfg)
	if _, err := r.Enroll(ctx, "leaked-hash", "intruder", "linux", "amd64", "1", "1", "tok-intruder"); !errors.Is(err, models.ErrTokenUsed) {
		t.Fatalf("a join token revoked before the restore enrolled a machine after it: %v", err)
	}
}

// A join token spent after the backup, its machine deleted since (the
// documented way to revoke a used token), must not be spendable again.
func TestRestore_JoinTokenSpentSinceStaysSpent(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.SQLite)
	s := storetest.MustOpenConfig(t, cfg)
	served(t, s)
	if _, err := s.CreateLabelledJoinToken(ctx, "admin", "h2", time.Now().Add(7*24*time.Hour), ""); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enroll(ctx, "h2", "m1", "linux", "amd64", "1", "1", "tok-m1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMachine(ctx, "admin", "m1"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := store.Restore(ctx, cfg.DataDir, backup, time.Now()); err != nil {
		t.Fatal(err)
	}
	r := storetest.MustOpenConfig(t, cfg)
	if _, err := r.Enroll(ctx, "h2", "intruder", "linux", "amd64", "1", "1", "tok-intruder"); !errors.Is(err, models.ErrTokenUsed) {
		t.Fatalf("a join token spent before the restore enrolled a second machine after it: %v", err)
	}
}

// A person Restore disables (only the backup has them) must have their
// tokens refused, as every other disable does (a RevokedUser revocation):
// tokens are checked against revocations only, never disabled_at.
func TestRestore_DisabledByRestoreRevokesTokens(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.SQLite)
	s := storetest.MustOpenConfig(t, cfg)
	served(t, s)
	for _, n := range []string{"admin", "gone"} {
		if err := s.CreateUser(ctx, "t", &models.User{Name: n, Role: models.RoleAdmin, PasswordHash: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Exec("DELETE FROM users WHERE name = 'gone'").Error; err != nil {
		t.Fatal(err)
	}
	s.Close()
	out, err := store.Restore(ctx, cfg.DataDir, backup, time.Now())
	if err != nil || len(out.Disabled) != 1 {
		t.Fatalf("%+v %v", out, err)
	}
	r := storetest.MustOpenConfig(t, cfg)
	rs, err := r.Revocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rs {
		if u, _, ok := models.ParseUserRevocationID(x.TokenID); ok && u == "gone" {
			return
		}
	}
	t.Fatalf("gone was disabled by the restore but no revocation refuses their sessions and API tokens: %+v", rs)
}

// Disaster recovery: the data dir on the new machine holds a fresh store
// (the controller was started once: firstUser made "admin"). Restoring the
// backup disables every other person in it, and gives the backup's admin
// the fresh store's one-time password.
func TestRestore_OverAnotherMeshsStoreCarriesNothing(t *testing.T) {
	ctx := context.Background()
	old := storetest.MustOpen(t, store.SQLite)
	served(t, old)
	for _, n := range []string{"admin", "alice"} {
		if err := old.CreateUser(ctx, "t", &models.User{Name: n, Role: models.RoleAdmin, PasswordHash: "hash-of-" + n}); err != nil {
			t.Fatal(err)
		}
	}
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := old.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	cfg := storetest.Config(t, store.SQLite)
	fresh := storetest.MustOpenConfig(t, cfg)
	served(t, fresh) // its own key: another mesh's store
	if err := fresh.CreateUser(ctx, "controller", &models.User{Name: "admin", Role: models.RoleAdmin, PasswordHash: "one-time"}); err != nil {
		t.Fatal(err)
	}
	fresh.Close()
	out, err := store.Restore(ctx, cfg.DataDir, backup, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Disabled) > 0 {
		t.Fatalf("restoring over a fresh store disabled %v", out.Disabled)
	}
}

// A backup taken before migration 0014 (no users.disabled_at) cannot be
// restored over a current store: carryPeople writes disabled_at into the
// unmigrated copy.
func TestRestore_OlderSchemaBackup(t *testing.T) {
	ctx := context.Background()
	migrations.Max = 13
	old := storetest.MustOpen(t, store.SQLite)
	served(t, old)
	if err := old.DB().Exec("INSERT INTO users (name, role, password_hash, created_at) VALUES ('admin', 'admin', 'x', ?)", time.Now()).Error; err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := old.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	migrations.Max = 0
	// The same store, since upgraded: the backup's file, migrated.
	cfg := storetest.Config(t, store.SQLite)
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "mesh.db"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	cur := storetest.MustOpenConfig(t, cfg)
	if _, err := cur.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cur.CreateUser(ctx, "t", &models.User{Name: "bob", Role: models.RoleAdmin, PasswordHash: "y"}); err != nil {
		t.Fatal(err)
	}
	cur.Close()
	out, err := store.Restore(ctx, cfg.DataDir, backup, time.Now())
	if err != nil {
		t.Fatalf("a schema-13 backup is refused: %v", err)
	}
	if out.People != 2 || out.Unread != "" {
		t.Fatalf("restored: %+v", out)
	}
}

// A data dir left by a restore that failed between renaming mesh.db and
// mesh.db-wal (or any dir holding a stale log without its file): the
// next restore puts the backup beside the old store's log, which SQLite
// then replays onto it.
func TestRestore_StaleLogBesideTheRestoredFile(t *testing.T) {
	ctx := context.Background()
	// The backup: one machine, m-backup.
	b := storetest.MustOpen(t, store.SQLite)
	fixture(t, b, "m-backup")
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := b.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	// Another store, its log not yet checkpointed, copied while open.
	ocfg := storetest.Config(t, store.SQLite)
	o := storetest.MustOpenConfig(t, ocfg)
	if err := o.DB().Exec("PRAGMA wal_autocheckpoint(0)").Error; err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		fixture(t, o, fmt.Sprintf("stale%d", i))
	}
	wal, err := os.ReadFile(filepath.Join(ocfg.DataDir, "mesh.db-wal"))
	if err != nil || len(wal) == 0 {
		t.Fatalf("no log to copy: %v", err)
	}
	cfg := storetest.Config(t, store.SQLite)
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "mesh.db-wal"), wal, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Restore(ctx, cfg.DataDir, backup, time.Now()); err != nil {
		t.Fatal(err)
	}
	r, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ok string
	if err := r.DB().Raw("PRAGMA integrity_check").Scan(&ok).Error; err != nil || ok != "ok" {
		t.Fatalf("the restored store is corrupt: %q %v", ok, err)
	}
	if _, err := r.Machine(ctx, "m-backup"); err != nil {
		t.Fatalf("the backup's machine is not in the restored store: %v", err)
	}
	if _, err := r.Machine(ctx, "stale0"); err == nil {
		t.Fatal("the stale log's machine is in the restored store")
	}
}

// served gives s the signing key a controller makes when it first serves
// a store: what tells a restore the backup and the store it replaces are
// the same mesh's.
func served(t *testing.T, s *store.Store) {
	t.Helper()
	if _, err := s.EnsureKey(context.Background(), "k1", models.KeyDeclaration); err != nil {
		t.Fatal(err)
	}
}

// TestRestore_OwnedAsTheStoreItReplaces: restore is run as root for a
// controller that runs as its own user (the packaged unit's): the restored
// store, and a lock file the restore made, are owned as the store it
// replaces is, or the controller could not open them. (Not as root, the
// owner is this process's either way, and that is what is checked.)
func TestRestore_OwnedAsTheStoreItReplaces(t *testing.T) {
	ctx := context.Background()
	cfg := storetest.Config(t, store.SQLite)
	s := storetest.MustOpenConfig(t, cfg)
	served(t, s)
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := s.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	s.Close()
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 65534, 65534 // the service's user
		if err := filepath.Walk(cfg.DataDir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, uid, gid) }); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(filepath.Join(cfg.DataDir, "controller.lock"))
	if _, err := store.Restore(ctx, cfg.DataDir, backup, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"mesh.db", "controller.lock"} {
		fi, err := os.Stat(filepath.Join(cfg.DataDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != gid {
			t.Fatalf("%s is owned by %d:%d, the store it replaced by %d:%d: the controller's user cannot open it", f, st.Uid, st.Gid, uid, gid)
		}
	}
}
