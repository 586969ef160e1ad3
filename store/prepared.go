package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
)

// Statements prepared once and kept, for the inserts a fan-out makes
// thousands of times with the same text. The embedded SQLite driver
// compiles a statement's text on every execution unless it was prepared,
// and then keeps SQLite's compiled statement (database/sql prepares it
// once on each pooled connection): compiling a multi-row insert was a
// quarter of a send row's CPU. PostgreSQL's driver caches its statements
// itself.
type preparedSet struct {
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// get returns the statement of query, preparing it on first use.
func (p *preparedSet) get(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.m[query]; st != nil {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if p.m == nil {
		p.m = map[string]*sql.Stmt{}
	}
	p.m[query] = st
	return st, nil
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

// insertPrepared inserts n rows into table through kept statements:
// "INSERT INTO table (columns) VALUES (?, …), … tail". row appends row i's
// values, one per column, to args. It returns the rows inserted (fewer
// than n when tail is ON CONFLICT DO NOTHING and some were there).
func (tx *Tx) insertPrepared(ctx context.Context, table string, columns []string, tail string, n int, row func(i int, args []any) []any) (int64, error) {
	stx, ok := tx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return 0, errors.New("store: a prepared insert runs in a transaction")
	}
	sqlDB, err := tx.s.db.DB()
	if err != nil {
		return 0, err
	}
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(columns)), ", ") + ")"
	var inserted int64
	args := make([]any, 0, insertRowsPer*len(columns))
	for i := 0; i < n; {
		k := insertRowsPer
		for k > n-i {
			k /= 2
		}
		q := "INSERT INTO " + table + " (" + strings.Join(columns, ", ") + ") VALUES " +
			strings.TrimSuffix(strings.Repeat(tuple+", ", k), ", ") + tail
		st, err := tx.s.prepared.get(ctx, sqlDB, q)
		if err != nil {
			return inserted, err
		}
		args = args[:0]
		for j := i; j < i+k; j++ {
			args = row(j, args)
		}
		res, err := stx.StmtContext(ctx, st).ExecContext(ctx, args...)
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
