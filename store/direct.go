package store

import (
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
)

// Statements run on database/sql directly (the transaction's handle, or
// the pool's for a statement of its own), not through gorm: gorm builds
// each statement's text and arguments anew (its Statement cloned, the
// text rewritten through a builder) on every call, and a report's few
// statements run thousands of times in the wave of reports after a
// change. The text is written with ? placeholders on both engines;
// PostgreSQL's $1, $2, … are made once per text. Each engine keeps the
// compiled statement by its text (SQLite through keepingConn,
// PostgreSQL's driver itself).

// errNotInTx: a direct statement runs only inside a transaction.
var errNotInTx = errors.New("store: a direct statement runs in a transaction")

// numbered holds each text's PostgreSQL spelling, by its ? spelling.
var numbered sync.Map

// numberPlaceholders spells query's ? placeholders as $1, $2, …: the
// texts given are the store's own and have no ? anywhere else.
func numberPlaceholders(query string) string {
	if q, ok := numbered.Load(query); ok {
		return q.(string)
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	numbered.Store(query, b.String())
	return b.String()
}

// direct gives the transaction's handle and query in its engine's
// spelling, and counts the statement.
func (tx *Tx) direct(query string) (*sql.Tx, string, error) {
	stx, ok := tx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return nil, "", errNotInTx
	}
	return stx, tx.s.directText(query), nil
}

// directText counts a statement run directly and spells its text for
// the store's engine.
func (s *Store) directText(query string) string {
	s.statements.Add(1)
	if s.dialect == Postgres {
		return numberPlaceholders(query)
	}
	return query
}

// scanRow runs query, which yields one row, and scans it into dest.
func (tx *Tx) scanRow(query string, args []any, dest ...any) error {
	stx, q, err := tx.direct(query)
	if err != nil {
		return err
	}
	return stx.QueryRowContext(tx.Statement.Context, q, args...).Scan(dest...)
}

// execDirect runs query, which yields no rows.
func (tx *Tx) execDirect(query string, args ...any) error {
	stx, q, err := tx.direct(query)
	if err != nil {
		return err
	}
	_, err = stx.ExecContext(tx.Statement.Context, q, args...)
	return err
}
