// Package store is mesh's persistence: gorm over embedded SQLite (the
// zero-configuration default) or PostgreSQL. Functions that take a *gorm.DB
// compose inside one transaction; Store methods wrap them. gorm's errors are
// mapped to models' sentinels here and nowhere else.
package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/libtnb/sqlite"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"mesh/keyring"
	"mesh/migrations"
	"mesh/models"
)

// Dialect names.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Config says where the store lives.
type Config struct {
	// DataDir holds the SQLite file (and its lock) when DatabaseURL is empty.
	DataDir string
	// DatabaseURL is a postgres:// URL; empty means SQLite in DataDir.
	DatabaseURL string
	// Exclusive takes an flock on the data dir so only one controller
	// serves a SQLite store; short commands (user add, migrate) leave it.
	Exclusive bool
	// Keyring, when set, keeps the signing keys' private halves sealed at
	// rest (see SealKeys); nil keeps them as they are stored.
	Keyring *keyring.Keyring
}

// Store is mesh's store.
type Store struct {
	db      *gorm.DB
	dialect string
	lock    *flock.Flock
	dataDir string // SQLite's
	keyring *keyring.Keyring

	// Now is the clock; tests fix it.
	Now func() time.Time
	// Rules say machine states (the thresholds are the controller's
	// settings); plans halt by them.
	Rules models.StateRules

	mu        sync.RWMutex
	onBumped  []func([]models.Bump)
	onRevoked []func([]models.Revocation)
	// onHostInfo is told of a machine whose host version or schemas
	// another instance recorded (hostInfoPrefix notifications).
	onHostInfo []func(machineID int64)

	statements atomic.Int64
	prepared   preparedSet

	// wmu serialises SQLite's write transactions in Go. SQLite's own busy
	// handler sleeps and retries, so a writer that commits back to back
	// (a fan-out composing batch after batch) starves the others (the
	// send writer); Go's mutex hands over in arrival order under contention.
	wmu sync.Mutex
	// gmu guards queued: writes waiting to share a transaction
	// (writeGrouped).
	gmu    sync.Mutex
	queued []*groupedWrite

	// channel is the NOTIFY channel of this store (PostgreSQL).
	channel string
	// sender names this store's own notifications where one must know
	// them from another instance's (hostInfoPrefix).
	sender string

	// ckpt checkpoints SQLite's log off the write path (checkpoint.go),
	// on a connection of its own to dsn.
	ckpt *checkpointer
	dsn  string

	// beforeStore, set only by tests, runs between a compose chunk's
	// snapshot and its insert: where another instance's insert and an
	// epoch's change can fall.
	beforeStore func()
	// beforeReportWrite, set only by tests, runs between a report's read
	// and its write, told whether the report is being stored at once
	// (insertReportAtOnce) or in a transaction.
	beforeReportWrite func(atOnce bool)
}

// countStatements counts every statement gorm issues, so tests and metrics
// can prove what a path costs the store.
func (s *Store) countStatements() error {
	count := func(*gorm.DB) { s.statements.Add(1) }
	cb := s.db.Callback()
	for _, err := range []error{
		cb.Create().After("gorm:create").Register("mesh:count", count),
		cb.Query().After("gorm:query").Register("mesh:count", count),
		cb.Update().After("gorm:update").Register("mesh:count", count),
		cb.Delete().After("gorm:delete").Register("mesh:count", count),
		cb.Row().After("gorm:row").Register("mesh:count", count),
		cb.Raw().After("gorm:raw").Register("mesh:count", count),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Statements is how many statements this store has issued (through gorm,
// and its prepared inserts).
func (s *Store) Statements() int64 { return s.statements.Load() }

// Open connects to the store described by cfg. It does not migrate.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	gcfg := &gorm.Config{
		TranslateError: true,
		Logger:         logger.Discard,
		NowFunc:        func() time.Time { return time.Now().UTC() },
	}
	s := &Store{Now: func() time.Time { return time.Now().UTC() }, keyring: cfg.Keyring, Rules: models.DefaultStateRules}
	var err error
	if cfg.DatabaseURL != "" {
		if !strings.HasPrefix(cfg.DatabaseURL, "postgres://") && !strings.HasPrefix(cfg.DatabaseURL, "postgresql://") {
			return nil, fmt.Errorf("database URL must start with postgres:// (empty means SQLite in the data dir)")
		}
		s.dialect = Postgres
		s.db, err = gorm.Open(postgres.Open(withSessionDefaults(cfg.DatabaseURL)), gcfg)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		sqlDB, _ := s.db.DB()
		sqlDB.SetMaxOpenConns(20)
		sqlDB.SetMaxIdleConns(20)
	} else {
		s.dialect = SQLite
		if cfg.DataDir == "" {
			return nil, errors.New("a data dir is needed for the embedded store")
		}
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		s.dataDir = cfg.DataDir
		if cfg.Exclusive {
			s.lock = flock.New(filepath.Join(cfg.DataDir, "controller.lock"))
			ok, err := s.lock.TryLock()
			if err != nil {
				return nil, fmt.Errorf("lock data dir: %w", err)
			}
			if !ok {
				return nil, fmt.Errorf("data dir %s is in use by another controller (it holds %s)", cfg.DataDir, s.lock.Path())
			}
		}
		// WAL lets readers run beside the one writer; busy_timeout makes a
		// second writer wait rather than fail; immediate transactions take
		// the write lock up front so two never deadlock upgrading a read.
		// temp_store(MEMORY) keeps statement journals (and sorts) in
		// memory: a multi-row insert inside a transaction journals the
		// pages it changes, and past 64 KiB SQLite spilled that journal to
		// a temporary file, a write system call a page — a fifth of a send
		// row's insert (BenchmarkInsertSends_1000). wal_autocheckpoint is
		// a backstop: the checkpointer copies the log back (checkpoint.go).
		dsn := "file:" + filepath.Join(cfg.DataDir, "mesh.db") +
			"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)" +
			"&_pragma=temp_store(MEMORY)&_txlock=immediate&_pragma=wal_autocheckpoint(" + strconv.Itoa(walBackstop) + ")" +
			"&_pragma=journal_size_limit(" + strconv.Itoa(walKeep) + ")" +
			// What the gorm dialect adds to a DSN it opens itself; it is
			// given connections that keep their statements (stmtcache.go).
			"&_texttotime=1&_inttotime=1&_time_format=sqlite"
		s.dsn = dsn
		var connector driver.Connector
		if connector, err = newKeepingConnector(dsn); err != nil {
			s.unlock()
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		s.db, err = gorm.Open(sqlite.New(sqlite.Config{Conn: sql.OpenDB(connector)}), gcfg)
		if err != nil {
			s.unlock()
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		sqlDB, _ := s.db.DB()
		sqlDB.SetMaxOpenConns(8)
		sqlDB.SetMaxIdleConns(8)
	}
	if s.dialect == Postgres {
		var names struct{ DB, Schema string }
		if err := s.db.WithContext(ctx).Raw("SELECT current_database() AS db, current_schema() AS schema").Scan(&names).Error; err != nil {
			s.Close()
			return nil, fmt.Errorf("connect postgres store: %w", err)
		}
		s.channel = notifyChannel(names.DB, names.Schema)
		s.sender = strconv.FormatUint(rand.Uint64(), 36)
	}
	if err := s.countStatements(); err != nil {
		s.Close()
		return nil, err
	}
	sqlDB, _ := s.db.DB()
	if err := sqlDB.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("connect %s store: %w", s.dialect, err)
	}
	if s.dialect == SQLite {
		if err := s.startCheckpointer(s.dsn, checkpointQuiet, checkpointMax); err != nil {
			s.Close()
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
	}
	return s, nil
}

// DefaultStatementTimeout bounds every statement on PostgreSQL unless the
// database URL sets statement_timeout itself: a statement stuck behind a
// lock fails instead of holding its request (and a connection) forever.
const DefaultStatementTimeout = "30s"

// sessionDefaults are the settings every PostgreSQL session of the store
// gets unless the database URL sets them: the statement timeout, and TCP
// keepalives that find a controller gone without a word (its machine lost
// power) in about a minute rather than the kernel's two hours — its
// backends let go of their locks then, the migration lock among them.
var sessionDefaults = [][2]string{
	{"statement_timeout", DefaultStatementTimeout},
	{"tcp_keepalives_idle", "30"}, {"tcp_keepalives_interval", "10"}, {"tcp_keepalives_count", "3"},
}

func withSessionDefaults(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	for _, kv := range sessionDefaults {
		if !q.Has(kv[0]) {
			q.Set(kv[0], kv[1])
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Dialect is SQLite or Postgres.
func (s *Store) Dialect() string { return s.dialect }

// DB is the gorm handle, for tests and the few callers that count statements.
func (s *Store) DB() *gorm.DB { return s.db }

func (s *Store) unlock() {
	if s.lock != nil {
		_ = s.lock.Unlock()
	}
}

// Close releases the connection and the data dir lock.
func (s *Store) Close() error {
	s.ckpt.stop()
	err := s.prepared.close()
	if s.db != nil {
		if sqlDB, e := s.db.DB(); e == nil {
			err = errors.Join(err, sqlDB.Close())
		}
	}
	s.unlock()
	return err
}

// migrationLockID is the advisory lock's id of the store whose
// notification channel is channel: two meshes in one database (in two
// schemas) do not wait for each other's migrations.
func migrationLockID(channel string) int64 {
	h := sha256.Sum256([]byte("migrate\x00" + channel))
	return int64(binary.BigEndian.Uint64(h[:8]) >> 1)
}

func (s *Store) gooseProvider(opts ...goose.ProviderOption) (*goose.Provider, error) {
	sqlDB, err := s.db.DB()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(migrations.FS, s.dialect)
	if err != nil {
		return nil, err
	}
	d := goose.DialectSQLite3
	if s.dialect == Postgres {
		d = goose.DialectPostgres
	}
	if migrations.Max > 0 {
		sub = capped{sub, migrations.Max}
	}
	return goose.NewProvider(d, sqlDB, sub, opts...)
}

// Migrate applies every pending migration, each in its own transaction,
// under a lock: two instances of a new build starting on one store (a
// rolling upgrade with replicas; serve and `user add` side by side on
// SQLite) migrate it once between them, the second waiting for the first.
// Without it the second failed to start ("column … already exists"), and a
// migration that does not fail when run twice ran twice.
func (s *Store) Migrate(ctx context.Context) (applied []string, err error) {
	var opts []goose.ProviderOption
	if s.dialect == Postgres {
		// A session's advisory lock, its id the store's own (the database
		// and schema, as the notification channel's), tried every second
		// for five minutes.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID(s.channel)), lock.WithLockTimeout(1, 300))
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	} else {
		l := flock.New(filepath.Join(s.dataDir, "migrate.lock"))
		if _, err := l.TryLockContext(ctx, 100*time.Millisecond); err != nil {
			return nil, fmt.Errorf("migrate: waiting for another process migrating the store: %w", err)
		}
		defer func() { _ = l.Unlock() }()
	}
	p, err := s.gooseProvider(opts...)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	for _, r := range res {
		applied = append(applied, r.Source.Path)
	}
	if err != nil {
		return applied, fmt.Errorf("migrate: %w", err)
	}
	return applied, nil
}

// SchemaVersion is the newest migration applied to the store, and the
// newest this binary knows.
func (s *Store) SchemaVersion(ctx context.Context) (store, known int64, err error) {
	p, err := s.gooseProvider()
	if err != nil {
		return 0, 0, err
	}
	store, err = p.GetDBVersion(ctx)
	if err != nil {
		return 0, 0, err
	}
	srcs := p.ListSources()
	if len(srcs) > 0 {
		known = srcs[len(srcs)-1].Version
	}
	return store, known, nil
}

// OnBumped registers f to be called, after commit, with every generation a
// committed transaction bumped. The waker of long polls hangs here.
func (s *Store) OnBumped(f func([]models.Bump)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onBumped = append(s.onBumped, f)
}

// Tx is a write transaction that remembers the generations it bumped so they
// are announced only once it has committed.
type Tx struct {
	*gorm.DB
	s       *Store
	bumps   []models.Bump
	revoked []models.Revocation
	// conn is the connection the transaction runs on (PostgreSQL): rows
	// are copied in through it (copyRows).
	conn *sql.Conn
}

// writeAttempts bounds how often a transaction PostgreSQL aborted as a
// deadlock victim (or a serialization failure) is run again.
const writeAttempts = 4

// write runs fn in one transaction; after it commits, bumped generations are
// announced to OnBumped listeners. On PostgreSQL a transaction aborted as a
// deadlock's victim or for serialization is run again from the start,
// after a short pause (fn must only act through tx): two writers that lock
// rows in different orders (a plan being made and one being stepped) both
// succeed.
func (s *Store) write(ctx context.Context, fn func(tx *Tx) error) error {
	if s.dialect == SQLite {
		s.wmu.Lock()
		defer s.wmu.Unlock()
	}
	return s.writeLocked(ctx, fn)
}

// writeLocked is write with SQLite's turn (wmu) already taken.
func (s *Store) writeLocked(ctx context.Context, fn func(tx *Tx) error) error {
	var t *Tx
	var err error
	for attempt := 1; ; attempt++ {
		if s.dialect == Postgres {
			// On a connection of its own, held for the transaction, so
			// that COPY can reach it (database/sql gives no way from a
			// transaction to its connection). The transaction is begun
			// without ctx's end: database/sql rolls back a transaction
			// whose context ends from a goroutine of its own and closes
			// its connection, and a Conn.Raw that had just found the
			// connection open then takes it as nil. Its statements run
			// under ctx, so an ended context still ends the transaction,
			// here, by its statement's error.
			err = s.db.WithContext(ctx).Connection(func(cdb *gorm.DB) error {
				conn, _ := cdb.Statement.ConnPool.(*sql.Conn)
				return cdb.WithContext(context.WithoutCancel(ctx)).Transaction(func(db *gorm.DB) error {
					t = &Tx{DB: db.WithContext(ctx), s: s, conn: conn}
					return fn(t)
				})
			})
		} else {
			err = s.db.WithContext(ctx).Transaction(func(db *gorm.DB) error {
				t = &Tx{DB: db, s: s}
				return fn(t)
			})
		}
		if attempt < writeAttempts && s.dialect == Postgres && retryable(err) && retryPause(ctx, attempt) {
			continue
		}
		break
	}
	if err != nil {
		return mapErr(err)
	}
	s.ckpt.wroteNow()
	if len(t.bumps) > 0 {
		s.mu.RLock()
		fs := s.onBumped
		s.mu.RUnlock()
		for _, f := range fs {
			f(t.bumps)
		}
	}
	s.announceRevoked(t.revoked)
	return nil
}

// Write runs fn in one write transaction (see write).
func (s *Store) Write(ctx context.Context, fn func(tx *Tx) error) error { return s.write(ctx, fn) }

// Write runs fn in one write transaction and returns what it made. A
// closure keeps no state outside its transaction: a retried transaction
// starts from nothing, and the result is whatever the attempt that
// committed returned (headscale's Write[T]).
func Write[T any](ctx context.Context, s *Store, fn func(tx *Tx) (T, error)) (T, error) {
	var out T
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// retryPause waits before a deadlock's victim runs again, and reports
// whether it may (ctx has not ended). Run again at once, the victim takes
// back the rows its abort released before the other writer, woken but not
// yet holding them, does, and the two deadlock again, each time after
// PostgreSQL's deadlock_timeout (1 s by default). The pause grows with the
// attempt and is jittered so that several victims do not return together.
func retryPause(ctx context.Context, attempt int) bool {
	d := time.Duration(attempt) * retryBackoff
	t := time.NewTimer(d + rand.N(d))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retryBackoff is the least pause before a victim's first rerun: far more
// than the other writer needs to finish once woken, far less than the
// deadlock_timeout a second deadlock would cost.
const retryBackoff = 10 * time.Millisecond

// retryable reports a PostgreSQL deadlock (40P01) or serialization
// failure (40001): the transaction was rolled back and may simply run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// mapErr turns gorm's errors into models' sentinels.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gorm.ErrRecordNotFound), errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w", models.ErrNotFound)
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return fmt.Errorf("%w: already exists", models.ErrConflict)
	case badText(err):
		return models.Invalid("", "text may not contain a NUL character (\\u0000) or bytes that are not UTF-8")
	case unavailable(err):
		return &models.RetryAfterError{After: 5 * time.Second, Err: fmt.Errorf("%w: %w", models.ErrUnavailable, err)}
	case storageFull(err):
		return fmt.Errorf("%w (%w)", models.ErrStorageFull, err)
	}
	return err
}

// badText reports PostgreSQL refusing a value's text (22021, 22P05): a
// NUL (\u0000 in JSON) or bytes that are not UTF-8, which SQLite stores. It is the input's fault, and
// was a 500 for a webhook or a report that carried one (found by
// FuzzWebhook and FuzzReport).
func badText(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "22021" || pe.Code == "22P05")
}

// unavailable says whether err means the store did not answer: a
// deadline passed (a lock held, packets dropped), a statement timed out,
// or the connection was refused or lost.
func unavailable(err error) bool {
	var pe *pgconn.PgError
	var ne net.Error
	var ce *pgconn.ConnectError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone):
		return true
	case errors.As(err, &pe):
		// 57014: statement timeout / query canceled; class 08: connection.
		return pe.Code == "57014" || strings.HasPrefix(pe.Code, "08")
	case errors.As(err, &ce), errors.As(err, &ne):
		return true
	}
	return false
}

// storageFull reports a write the disk had no room for: PostgreSQL's
// disk_full (53100, "could not extend file"), SQLite's SQLITE_FULL (the
// driver's error has Code(); extended codes keep 13 in the low byte), or
// ENOSPC itself.
func storageFull(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "53100"
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) && coded.Code()&0xff == 13 {
		return true
	}
	return errors.Is(err, syscall.ENOSPC)
}

// inChunks calls fn with slices of at most n ids, so no statement carries
// more placeholders than the dialect allows.
func inChunks[T any](ids []T, n int, fn func([]T) error) error {
	for len(ids) > 0 {
		k := min(n, len(ids))
		if err := fn(ids[:k]); err != nil {
			return err
		}
		ids = ids[k:]
	}
	return nil
}

// capped hides migrations newer than max (a build that knows fewer).
type capped struct {
	fs.FS
	max int64
}

func (c capped) ReadDir(name string) ([]fs.DirEntry, error) {
	ents, err := fs.ReadDir(c.FS, name)
	var out []fs.DirEntry
	for _, e := range ents {
		var n int64
		if _, scanErr := fmt.Sscanf(e.Name(), "%d_", &n); scanErr == nil && n > c.max {
			continue
		}
		out = append(out, e)
	}
	return out, err
}
