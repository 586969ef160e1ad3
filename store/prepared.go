package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Statements prepared once and kept, for the inserts a fan-out makes
// thousands of times with the same text. The embedded SQLite driver
// compiles a statement's text on every execution unless it was prepared,
// and then keeps SQLite's compiled statement: compiling a multi-row
// insert was a quarter of a send row's CPU. PostgreSQL's driver caches
// its statements itself.
//
// They are prepared before a write transaction begins (prepareInserts):
// preparing through the pool inside one would hold a second connection.
type preparedSet struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// lookup returns the kept statement of query, if there is one.
func (p *preparedSet) lookup(query string) *sql.Stmt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[query]
}

// prepare keeps the statement of query, preparing it on db if it is not
// kept yet.
func (p *preparedSet) prepare(ctx context.Context, db *sql.DB, query string) error {
	if p.lookup(query) != nil {
		return nil
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*sql.Stmt{}
	}
	if p.m[query] != nil {
		return st.Close() // prepared meanwhile by another writer
	}
	p.m[query] = st
	return nil
}

func (p *preparedSet) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, st := range p.m {
		errs = append(errs, st.Close())
	}
	p.m = nil
	return errors.Join(errs...)
}

// insertRowsPer is the most rows one prepared insert carries; the rest
// of a group goes in statements of 32, 16, … 1 rows, so a group of any
// size is a handful of executions of at most seven kept statements.
const insertRowsPer = 64

// preparedInsert names the rows inserted through kept statements: "INSERT
// INTO table (columns) VALUES (?, …), … tail".
type preparedInsert struct {
	table   string
	columns []string
	tail    string // e.g. " ON CONFLICT DO NOTHING"

	once    sync.Once
	queries map[int]string // by row count
}

// query is the insert of k rows (k a power of two up to insertRowsPer).
func (pi *preparedInsert) query(k int) string {
	pi.once.Do(func() {
		pi.queries = map[int]string{}
		tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(pi.columns)), ", ") + ")"
		for n := insertRowsPer; n >= 1; n /= 2 {
			pi.queries[n] = "INSERT INTO " + pi.table + " (" + strings.Join(pi.columns, ", ") + ") VALUES " +
				strings.TrimSuffix(strings.Repeat(tuple+", ", n), ", ") + pi.tail
		}
	})
	return pi.queries[k]
}

// prepareInserts keeps the statements of each pi, for every row count it uses;
// call it outside any write transaction (the one-row statement is kept
// last: once it is there, all are).
func (s *Store) prepareInserts(ctx context.Context, pis ...*preparedInsert) error {
	for _, pi := range pis {
		if s.dialect != SQLite || s.prepared.lookup(pi.query(1)) != nil {
			continue
		}
		sqlDB, err := s.db.DB()
		if err != nil {
			return err
		}
		for k := insertRowsPer; k >= 1; k /= 2 {
			if err := s.prepared.prepare(ctx, sqlDB, pi.query(k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// insertPrepared inserts n rows through pi's kept statements (prepared
// here, for this transaction only, if prepareInserts did not run). row
// appends row i's values, one per column, to args. It returns the rows
// inserted (fewer than n when the tail is ON CONFLICT DO NOTHING and some
// were there).
func (tx *Tx) insertPrepared(ctx context.Context, pi *preparedInsert, n int, row func(i int, args []any) []any) (int64, error) {
	stx, ok := tx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return 0, errors.New("store: a prepared insert runs in a transaction")
	}
	var inserted int64
	args := make([]any, 0, insertRowsPer*len(pi.columns))
	for i := 0; i < n; {
		k := insertRowsPer
		for k > n-i {
			k /= 2
		}
		var st *sql.Stmt
		if kept := tx.s.prepared.lookup(pi.query(k)); kept != nil {
			st = stx.StmtContext(ctx, kept)
		} else {
			var err error
			if st, err = stx.PrepareContext(ctx, pi.query(k)); err != nil {
				return inserted, err
			}
		}
		args = args[:0]
		for j := i; j < i+k; j++ {
			args = row(j, args)
		}
		res, err := st.ExecContext(ctx, args...)
		tx.s.statements.Add(1)
		if err != nil {
			return inserted, err
		}
		got, err := res.RowsAffected()
		if err != nil {
			return inserted, err
		}
		inserted += got
		i += k
	}
	return inserted, nil
}

// copyRows writes n rows into table with PostgreSQL's COPY, through the
// transaction's connection, and returns how many it wrote. A chunk's rows
// go as a stream of binary tuples: no statement to parse, and no
// parameter of every row's bytes for the driver to build in one buffer
// and copy again into its message (an array parameter a column, grown
// from 128 bytes to ~700 KiB for a chunk's batch envelopes, was half the
// controller's cost of inserting them). Any error fails the whole COPY.
// The callback given to Raw returns only CopyFrom's errors, never
// driver.ErrBadConn: with it Raw would close the connection under the
// transaction still open on it, and wait for that forever.
func (tx *Tx) copyRows(table string, columns []string, n int, row func(i int) []any) (int64, error) {
	if tx.conn == nil {
		return 0, errors.New("store: COPY runs in a write transaction on PostgreSQL")
	}
	var copied int64
	err := tx.conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("store: COPY through a %T connection", dc)
		}
		var err error
		copied, err = c.Conn().CopyFrom(tx.Statement.Context, pgx.Identifier{table}, columns,
			pgx.CopyFromSlice(n, func(i int) ([]any, error) { return row(i), nil }))
		return err
	})
	tx.s.statements.Add(1)
	return copied, err
}
