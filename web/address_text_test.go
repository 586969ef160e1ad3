package web_test

import (
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// The dashboard's pages took a name or a filter that is not text (a NUL,
// bytes not UTF-8) to the store, and each store answered its own way
// (SQLite a 404 or an empty page, PostgreSQL a 400), as the API did.
func TestDashboard_NotTextInPathOrQueryAnsweredAlike(t *testing.T) {
	paths := []string{
		"/machines/m%00x",
		"/ui/machines/m%00x/status",
		"/audit?target=machine/m%00",
		"/?q=m%00",
	}
	got := map[string][]int{}
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d)
			e.AddUser("vera", "viewer")
			e.Enroll("m1")
			vw := newBrowser(t, e.URL)
			vw.login("vera", "password-of-vera")
			for _, p := range paths {
				st, _ := vw.get(p)
				got[p] = append(got[p], st)
			}
		})
	}
	for _, p := range paths {
		if len(got[p]) != 2 {
			continue
		}
		if got[p][0] != 400 || got[p][1] != 400 {
			t.Errorf("GET %s: SQLite %d, PostgreSQL %d", p, got[p][0], got[p][1])
		}
	}
}
