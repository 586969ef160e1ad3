package api_test

import (
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// The same request answers alike on either store (a NUL in a body is
// refused 400 on both for that reason, TestNul_RefusedAlikeOnEveryStore).
// A NUL or bytes not UTF-8 in a path name or a filter did not: SQLite
// answered 404 (or 200 with an empty page), PostgreSQL 400.
func TestNul_InAPathOrFilterAnsweredAlikeOnEveryStore(t *testing.T) {
	paths := []string{
		"/api/v1/machines/m%00x",
		"/api/v1/modules/w%00b",
		"/api/v1/host-releases/1.0%00/rollout",
		"/api/v1/audit?target=machine/m%00",
		"/api/v1/audit?actor=user:%ff",
	}
	got := map[string][]int{}
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d)
			for _, p := range paths {
				r, _ := e.Do(ctltest.Request{Method: "GET", Path: p, Token: e.Admin})
				got[p] = append(got[p], r.StatusCode)
			}
		})
	}
	for _, p := range paths {
		if got[p][0] != 400 || got[p][1] != 400 {
			t.Errorf("GET %s: SQLite %d, PostgreSQL %d", p, got[p][0], got[p][1])
		}
	}
}
