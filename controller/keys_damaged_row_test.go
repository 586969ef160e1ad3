package controller_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"mesh/controller"
	"mesh/keyring"
	"mesh/store"
)

// rawRows reads id -> private_key of a table, as stored, through a store
// opened without a keyring.
func rawRows(t *testing.T, sc store.Config, table string) map[string][]byte {
	t.Helper()
	st, err := store.Open(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.DB().Raw("SELECT id, private_key FROM " + table).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var id string
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		out[id] = b
	}
	return out
}

func countAudit(t *testing.T, sc store.Config, action string) int64 {
	t.Helper()
	st, err := store.Open(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var n int64
	if err := st.DB().Raw("SELECT count(*) FROM audit_events WHERE action = ?", action).Row().Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A sealed key row whose header was damaged (one byte) is no plaintext key:
// a start with the right key refuses it without writing anything. It was
// sealed again (the damage kept under a second layer, "sealed at rest" on
// the record and in the log) before the start refused it. Both tables of
// keys: the signing keys' and the TLS keys' (the mesh CA's).
func TestKeys_ADamagedSealedRowIsNotSealedAgain(t *testing.T) {
	for _, row := range []struct{ table, id string }{{"keys", "k1"}, {"tls_keys", "ca1"}} {
		t.Run(row.table, func(t *testing.T) {
			keyDialects(t, func(t *testing.T, sc store.Config) {
				keyFile, _ := writeKey(t)
				first := mustStart(t, sc, controller.Config{KeyFile: keyFile})
				first.stop(t)

				st, err := store.Open(context.Background(), sc)
				if err != nil {
					t.Fatal(err)
				}
				raw := rawRows(t, sc, row.table)[row.id]
				if !keyring.IsSealed(raw) {
					t.Fatalf("%s %s is not sealed after a start with a key", row.table, row.id)
				}
				damaged := append([]byte(nil), raw...)
				damaged[0] = 'M' // "Mesh/sealed…"
				if err := st.DB().Exec("UPDATE "+row.table+" SET private_key = ? WHERE id = ?", damaged, row.id).Error; err != nil {
					t.Fatal(err)
				}
				st.Close()
				auditsBefore := countAudit(t, sc, "seal-keys")

				r, err := startOn(t, sc, controller.Config{KeyFile: keyFile})
				if err == nil {
					r.stop(t)
					t.Fatalf("started on a store whose %s row %s is damaged", row.table, row.id)
				}
				if !strings.Contains(err.Error(), "damaged") {
					t.Errorf("the refusal does not say the row may be damaged: %v", err)
				}
				after := rawRows(t, sc, row.table)[row.id]
				if !bytes.Equal(after, damaged) {
					t.Errorf("the refused start rewrote the damaged row: %d bytes -> %d bytes (sealed again: %v)", len(damaged), len(after), keyring.IsSealed(after))
				}
				if n := countAudit(t, sc, "seal-keys"); n != auditsBefore {
					t.Errorf("the refused start put %d seal-keys audit row(s) on the record, claiming the damaged row was sealed at rest", n-auditsBefore)
				}
				if strings.Contains(r.log.String(), "now sealed") {
					t.Errorf("the log says plaintext keys were sealed, though none was plaintext")
				}
			})
		})
	}
}
