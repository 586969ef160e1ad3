package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
)

// openKeeping is a one-connection database through keepingConnector, and
// a way to look at that connection's kept statements.
func openKeeping(t *testing.T) (*sql.DB, func() map[string]*keptStmt) {
	t.Helper()
	c, err := newKeepingConnector("file:" + filepath.Join(t.TempDir(), "k.db") + "?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE t (a INTEGER)"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := db.Exec("INSERT INTO t (a) VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
	}
	kept := func() map[string]*keptStmt {
		var out map[string]*keptStmt
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.Raw(func(dc any) error {
			out = dc.(*keepingConn).kept
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	return db, kept
}

func TestKeepingConn_KeepsAndReuses(t *testing.T) {
	db, kept := openKeeping(t)
	const q = "SELECT a FROM t WHERE a >= ? ORDER BY a"
	for range 3 {
		var n int
		if err := db.QueryRow(q, 2).Scan(&n); err != nil || n != 2 {
			t.Fatalf("got %d, %v", n, err)
		}
	}
	if kept()[q] == nil {
		t.Fatalf("the statement was not kept: %v", kept())
	}
	if _, ok := kept()["CREATE TABLE t (a INTEGER)"]; ok {
		t.Fatal("a statement without arguments was kept")
	}
	// The schema changed under a kept statement: SQLite compiles it again.
	if _, err := db.Exec("ALTER TABLE t ADD COLUMN b TEXT NOT NULL DEFAULT 'x'"); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query("SELECT * FROM t WHERE a >= ? ORDER BY a", 3)
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	rows.Close()
	if len(cols) != 2 {
		t.Fatalf("columns %v after the schema grew", cols)
	}
	// A statement that does not compile reports its error.
	if _, err := db.Exec("INSERT INTO nowhere VALUES (?)", 1); err == nil {
		t.Fatal("an insert into no table succeeded")
	}
}

// The same text run again while its rows are still open (a query inside
// another's loop, in one transaction) gets a statement of its own.
func TestKeepingConn_SameTextWhileOpen(t *testing.T) {
	db, _ := openKeeping(t)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = "SELECT a FROM t WHERE a >= ? ORDER BY a"
	rows, err := tx.Query(q, 1)
	if err != nil {
		t.Fatal(err)
	}
	var outer, inner []int
	for rows.Next() {
		var a int
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		outer = append(outer, a)
		var b int
		if err := tx.QueryRow(q, a).Scan(&b); err != nil {
			t.Fatal(err)
		}
		inner = append(inner, b)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(outer) != "[1 2 3]" || fmt.Sprint(inner) != "[1 2 3]" {
		t.Fatalf("outer %v inner %v, want [1 2 3] both", outer, inner)
	}
}

func TestKeepingConn_Bounded(t *testing.T) {
	db, kept := openKeeping(t)
	for i := range keptPerConn + 20 {
		var n int
		if err := db.QueryRow(fmt.Sprintf("SELECT count(*) + %d FROM t WHERE a > ?", i), 0).Scan(&n); err != nil || n != 3+i {
			t.Fatalf("query %d: %d, %v", i, n, err)
		}
	}
	k := kept()
	if len(k) != keptPerConn {
		t.Fatalf("%d statements kept, want at most %d", len(k), keptPerConn)
	}
	if k["SELECT count(*) + 0 FROM t WHERE a > ?"] != nil || k[fmt.Sprintf("SELECT count(*) + %d FROM t WHERE a > ?", keptPerConn+19)] == nil {
		t.Fatal("not the statement used longest ago was let go")
	}
}
