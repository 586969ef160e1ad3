package store

import (
	"context"
	"database/sql/driver"
	"errors"

	msqlite "modernc.org/sqlite"
)

// The embedded SQLite engine compiles a statement's text every time a
// connection is given it to run directly, which is how gorm runs every
// statement; compiling was ~40% of storing a host's report (reading the
// machine's row by its id cost 130 µs, nearly all of it compiling the
// statement). So each SQLite connection keeps the statements it compiled,
// by their text, and runs them again. SQLite recompiles a kept statement
// by itself when the schema changed under it. Statements without
// arguments (migrations, pragmas, scripts) are not kept.

// keptPerConn bounds the statements a connection keeps; past it, the one
// used longest ago is let go.
const keptPerConn = 256

// keepingConnector opens the embedded engine's connections, through the
// driver it registers (with whatever is registered on it), wrapped so that
// they keep their statements: the way the engine's NewConnector documents.
type keepingConnector struct{ driver.Connector }

// newKeepingConnector is a connector to the SQLite database dsn names.
func newKeepingConnector(dsn string) (driver.Connector, error) {
	base, err := msqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return keepingConnector{base}, nil
}

func (k keepingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := k.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	c, ok := dc.(sqliteConn)
	if !ok {
		dc.Close()
		return nil, errors.New("store: the SQLite driver's connection lacks a method it had")
	}
	return &keepingConn{sqliteConn: c, kept: map[string]*keptStmt{}}, nil
}

// sqliteConn is what database/sql uses of the engine's connection.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// keepingConn is an engine connection that keeps its statements. Like
// every driver connection it is used by one goroutine at a time.
type keepingConn struct {
	sqliteConn
	kept map[string]*keptStmt
	tick uint64 // counts uses, to tell which statement was used longest ago
}

type keptStmt struct {
	st   driver.Stmt
	busy bool // its rows are still open: the same text again runs a statement of its own
	used uint64
}

// stmtFor is the kept statement of query, compiled now if it is not kept
// yet; nil when it is busy or does not compile (the caller runs query
// directly, which reports the error).
func (c *keepingConn) stmtFor(ctx context.Context, query string) *keptStmt {
	c.tick++
	if k := c.kept[query]; k != nil {
		if k.busy {
			return nil
		}
		k.used = c.tick
		return k
	}
	st, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	if len(c.kept) >= keptPerConn {
		c.letGoOldest()
	}
	k := &keptStmt{st: st, used: c.tick}
	c.kept[query] = k
	return k
}

// letGoOldest closes the statement used longest ago that is not busy.
func (c *keepingConn) letGoOldest() {
	var oldest string
	var at uint64
	for q, k := range c.kept {
		if !k.busy && (oldest == "" || k.used < at) {
			oldest, at = q, k.used
		}
	}
	if oldest != "" {
		c.kept[oldest].st.Close()
		delete(c.kept, oldest)
	}
}

func (c *keepingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if len(args) > 0 {
		if k := c.stmtFor(ctx, query); k != nil {
			return k.st.(driver.StmtExecContext).ExecContext(ctx, args)
		}
	}
	return c.sqliteConn.ExecContext(ctx, query, args)
}

func (c *keepingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) > 0 {
		if k := c.stmtFor(ctx, query); k != nil {
			rows, err := k.st.(driver.StmtQueryContext).QueryContext(ctx, args)
			if err != nil {
				return nil, err
			}
			sr, ok := rows.(sqliteRows)
			if !ok {
				return rows, nil // never: the engine's rows tell their types
			}
			k.busy = true
			return &keptRows{sqliteRows: sr, k: k}, nil
		}
	}
	return c.sqliteConn.QueryContext(ctx, query, args)
}

// Unwrap is the engine's own connection (the engine's Limit looks for it).
func (c *keepingConn) Unwrap() driver.Conn { return c.sqliteConn }

// Close lets every kept statement go before the connection.
func (c *keepingConn) Close() error {
	for q, k := range c.kept {
		k.st.Close()
		delete(c.kept, q)
	}
	return c.sqliteConn.Close()
}

// keptRows frees its kept statement for the next use once closed (the
// engine resets the statement then). It tells the columns' types as the
// engine's rows do, which gorm reads to scan into maps.
type keptRows struct {
	sqliteRows
	k *keptStmt
}

// sqliteRows is what database/sql uses of the engine's rows.
type sqliteRows interface {
	driver.Rows
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypeNullable
	driver.RowsColumnTypePrecisionScale
	driver.RowsColumnTypeScanType
}

func (r *keptRows) Close() error {
	err := r.sqliteRows.Close()
	r.k.busy = false
	return err
}
