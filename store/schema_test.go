package store_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"mesh/store"
	"mesh/store/storetest"
)

// column is a dialect-neutral description of a column.
type column struct {
	Type     string
	Nullable bool
	Default  string
}

// family maps a dialect's declared type to one word, so that the two
// dialects can be compared.
func family(t string) string {
	t = strings.ToLower(t)
	switch {
	case strings.Contains(t, "int"):
		return "integer"
	case strings.Contains(t, "bool"):
		return "boolean"
	case strings.Contains(t, "time") || strings.Contains(t, "date"):
		return "timestamp"
	case t == "bytea" || t == "blob":
		return "bytes"
	case t == "text":
		return "text"
	}
	return t
}

// normDefault removes the dialects' spelling of the same default.
func normDefault(d string) string {
	d = strings.ToLower(strings.TrimSpace(d))
	d = strings.TrimSuffix(d, "::text")
	switch d {
	case "false", "0":
		return "false"
	case "true", "1":
		return "true"
	}
	if strings.HasPrefix(d, "nextval(") {
		return "" // identity columns: auto-increment in both
	}
	return d
}

func schemaOf(t *testing.T, s *store.Store) (map[string]map[string]column, map[string]string) {
	t.Helper()
	db := s.DB()
	tables := map[string]map[string]column{}
	uniques := map[string]string{}
	if s.Dialect() == store.SQLite {
		var names []string
		db.Raw(`SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' AND name <> 'goose_db_version'`).Scan(&names)
		for _, n := range names {
			var cols []struct {
				Name      string
				Type      string
				NotNull   int     `gorm:"column:notnull"`
				DfltValue *string `gorm:"column:dflt_value"`
				Pk        int
			}
			db.Raw(fmt.Sprintf("PRAGMA table_info(%q)", n)).Scan(&cols)
			tables[n] = map[string]column{}
			for _, c := range cols {
				d := ""
				if c.DfltValue != nil {
					d = *c.DfltValue
				}
				tables[n][c.Name] = column{family(c.Type), c.NotNull == 0 && c.Pk == 0, normDefault(d)}
			}
			var idx []struct {
				Name   string
				Unique int
				Origin string
			}
			db.Raw(fmt.Sprintf("PRAGMA index_list(%q)", n)).Scan(&idx)
			for _, i := range idx {
				var cs []struct{ Name string }
				db.Raw(fmt.Sprintf("PRAGMA index_info(%q)", i.Name)).Scan(&cs)
				var names []string
				for _, c := range cs {
					names = append(names, c.Name)
				}
				kind := "unique"
				if i.Unique == 0 {
					kind = "index"
				}
				uniques[n+"("+strings.Join(names, ",")+")"] = kind
			}
			// An INTEGER PRIMARY KEY is the rowid, with no index of its own.
			for _, c := range cols {
				if c.Pk == 1 && !strings.Contains(fmt.Sprint(idx), "pk") {
					pks := []string{}
					for _, c2 := range cols {
						if c2.Pk > 0 {
							pks = append(pks, c2.Name)
						}
					}
					uniques[n+"("+strings.Join(pks, ",")+")"] = "unique"
					break
				}
			}
		}
		return tables, uniques
	}
	var cols []struct {
		TableName     string
		ColumnName    string
		DataType      string
		IsNullable    string
		ColumnDefault *string
	}
	// Partitions are the parent tables' storage, not tables of their own:
	// the parents are compared.
	var partitions []string
	db.Raw(`SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relispartition`).Scan(&partitions)
	isPartition := map[string]bool{}
	for _, p := range partitions {
		isPartition[p] = true
	}
	var partitioned []string
	db.Raw(`SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'p'`).Scan(&partitioned)
	isPartitioned := map[string]bool{}
	for _, p := range partitioned {
		isPartitioned[p] = true
	}
	db.Raw(`SELECT table_name, column_name, data_type, is_nullable, column_default
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name <> 'goose_db_version'`).Scan(&cols)
	for _, c := range cols {
		if isPartition[c.TableName] {
			continue
		}
		if tables[c.TableName] == nil {
			tables[c.TableName] = map[string]column{}
		}
		d := ""
		if c.ColumnDefault != nil {
			d = *c.ColumnDefault
		}
		if isPartitioned[c.TableName] && c.ColumnName == partitionKey && d == "mesh_epoch()" {
			d = "0" // SQLite, unpartitioned, has only epoch 0
		}
		tables[c.TableName][c.ColumnName] = column{family(c.DataType), c.IsNullable == "YES", normDefault(d)}
	}
	var idx []struct {
		Tablename string
		Indexdef  string
	}
	db.Raw(`SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename <> 'goose_db_version'`).Scan(&idx)
	for _, i := range idx {
		if isPartition[i.Tablename] {
			continue
		}
		open := strings.LastIndex(i.Indexdef, "(")
		cols := strings.ReplaceAll(strings.Trim(i.Indexdef[open:], "()"), " ", "")
		if isPartitioned[i.Tablename] {
			// PostgreSQL makes every unique key of a partitioned table
			// hold its partition key; SQLite keeps the key without it.
			cols = strings.TrimSuffix(cols, ","+partitionKey)
		}
		kind := "unique"
		if !strings.Contains(i.Indexdef, "UNIQUE") {
			kind = "index"
		}
		uniques[i.Tablename+"("+cols+")"] = kind
	}
	return tables, uniques
}

// partitionKey is the column PostgreSQL partitions sends, reports and
// declarations by (migration 0016).
const partitionKey = "epoch"

// TestMigrations_DialectsAgree proves both dialects end with the same tables,
// columns, types, nullability, defaults and unique indexes.
func TestMigrations_DialectsAgree(t *testing.T) {
	lite := storetest.MustOpen(t, store.SQLite)
	pg := storetest.MustOpen(t, store.Postgres)
	lt, lu := schemaOf(t, lite)
	pt, pu := schemaOf(t, pg)
	if len(lt) == 0 {
		t.Fatal("no tables read from SQLite")
	}
	var diffs []string
	for tbl, cols := range lt {
		if pt[tbl] == nil {
			diffs = append(diffs, "table "+tbl+" only in sqlite")
			continue
		}
		for c, def := range cols {
			if p, ok := pt[tbl][c]; !ok {
				diffs = append(diffs, tbl+"."+c+" only in sqlite")
			} else if p != def {
				diffs = append(diffs, fmt.Sprintf("%s.%s: sqlite %+v, postgres %+v", tbl, c, def, p))
			}
		}
		for c := range pt[tbl] {
			if _, ok := cols[c]; !ok {
				diffs = append(diffs, tbl+"."+c+" only in postgres")
			}
		}
	}
	for tbl := range pt {
		if lt[tbl] == nil {
			diffs = append(diffs, "table "+tbl+" only in postgres")
		}
	}
	for u := range lu {
		if pu[u] == "" {
			diffs = append(diffs, "unique "+u+" only in sqlite")
		}
	}
	for u := range pu {
		if lu[u] == "" {
			diffs = append(diffs, "unique "+u+" only in postgres")
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("dialects differ:\n%s", strings.Join(diffs, "\n"))
	}
	v, known, err := lite.SchemaVersion(context.Background())
	if err != nil || v != known || v == 0 {
		t.Fatalf("sqlite schema version %d of %d known: %v", v, known, err)
	}
}

// TestMigrations_DialectsAgreeOnEveryIndex: the comparison read unique
// indexes only, so an index one dialect's migration left out (0038's on
// merges.before_commit and builds.merge_id, which a late push's walk
// probes) went unseen.
func TestMigrations_DialectsAgreeOnEveryIndex(t *testing.T) {
	pg := storetest.MustOpen(t, store.Postgres)
	_, before := schemaOf(t, pg)
	if err := pg.DB().Exec("DROP INDEX merges_before_commit").Error; err != nil {
		t.Fatal(err)
	}
	if _, after := schemaOf(t, pg); len(after) != len(before)-1 {
		t.Fatalf("PostgreSQL without merges_before_commit reads %d indexes, with it %d: the comparison does not see it", len(after), len(before))
	}
}
