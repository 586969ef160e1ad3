// Package storetest opens real stores for tests: SQLite in a temp dir, and
// PostgreSQL in a schema of its own on MESH_TEST_POSTGRES_URL. When
// MESH_TEST_REQUIRE_POSTGRES is set, a missing PostgreSQL fails the test
// instead of skipping it (CI sets both).
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the driver for making and dropping schemas

	"mesh/store"
)

// PostgresURL returns the base URL of the test PostgreSQL, or skips (or
// fails, when it is required) the test.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("MESH_TEST_POSTGRES_URL")
	if u == "" {
		if os.Getenv("MESH_TEST_REQUIRE_POSTGRES") != "" {
			tb.Fatal("MESH_TEST_REQUIRE_POSTGRES is set but MESH_TEST_POSTGRES_URL is empty")
		}
		tb.Skip("MESH_TEST_POSTGRES_URL is not set; PostgreSQL tests skipped")
	}
	return u
}

// NewPostgresSchema makes a fresh schema and returns a URL whose
// search_path points into it; the schema is dropped when the test ends.
func NewPostgresSchema(tb testing.TB) string {
	tb.Helper()
	base := PostgresURL(tb)
	db, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		if os.Getenv("MESH_TEST_REQUIRE_POSTGRES") == "" {
			tb.Skipf("PostgreSQL at %s is not usable: %v", base, err)
		}
		tb.Fatalf("PostgreSQL at %s: %v", base, err)
	}
	tb.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err == nil {
			_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
			db.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Config returns a store config for a dialect: a temp SQLite data dir or a
// fresh PostgreSQL schema.
func Config(tb testing.TB, dialect string) store.Config {
	tb.Helper()
	if dialect == store.Postgres {
		return store.Config{DataDir: tb.TempDir(), DatabaseURL: NewPostgresSchema(tb)}
	}
	return store.Config{DataDir: tb.TempDir()}
}

// Migrated is Config with the SQLite store already migrated: a copy of
// one this process migrated once (migrating a new store under the race
// detector took ~0.5 s of CPU, most of a SQLite test controller's start).
// Opening and migrating it finds every migration applied. PostgreSQL's
// schema is migrated as it opens, as Config's.
func Migrated(tb testing.TB, dialect string) store.Config {
	tb.Helper()
	cfg := Config(tb, dialect)
	if dialect == store.Postgres {
		return cfg
	}
	db, err := migratedSQLite()
	if err != nil {
		tb.Fatalf("migrating the SQLite store tests copy: %v", err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "mesh.db"), db, 0o600); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// migratedSQLite is a SQLite store's file as the migrations leave it,
// written whole by VACUUM INTO (no write-ahead log beside it).
var migratedSQLite = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "mesh-storetest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(context.Background(), store.Config{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if _, err := s.Migrate(context.Background()); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, "migrated.db")
	if err := s.DB().Exec("VACUUM INTO ?", out).Error; err != nil {
		return nil, err
	}
	return os.ReadFile(out)
})

// MustOpen opens and migrates a store of the dialect.
func MustOpen(tb testing.TB, dialect string) *store.Store {
	tb.Helper()
	return MustOpenConfig(tb, Migrated(tb, dialect))
}

// MustOpenConfig opens and migrates the store cfg describes (Config's),
// for tests that look at its files too.
func MustOpenConfig(tb testing.TB, cfg store.Config) *store.Store {
	tb.Helper()
	s, err := store.Open(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return s
}

// Dialects runs f once per dialect, as subtests "sqlite" and "postgres".
func Dialects(t *testing.T, f func(t *testing.T, s *store.Store)) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) { f(t, MustOpen(t, d)) })
	}
}
