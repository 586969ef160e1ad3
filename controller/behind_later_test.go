package controller_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// TestBehind_OnceTheStoreIsMigratedUnderIt: a newer build migrates the
// store while this controller serves (the rolling upgrade: its `migrate`,
// or a replica of it starting). Within a heartbeat this controller says it
// is behind where it says so when it starts behind: a route it does not
// serve is a 501 saying why, not a plain 404, and the dashboard's banner
// shows. The newer build's migration is written as goose records it.
func TestBehind_OnceTheStoreIsMigratedUnderIt(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{HeartbeatEvery: 100 * time.Millisecond})
	_, known, err := e.Ctl.Store.SchemaVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Asked outside ctltest.Do, which holds every answer to openapi.yaml:
	// this route is in no spec of this build.
	newer := func() (int, string) {
		req, _ := http.NewRequest("GET", e.URL+"/api/v1/a-route-of-a-newer-build", nil)
		req.Header.Set("Authorization", "Bearer "+e.Admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := newer(); st != http.StatusNotFound {
		t.Fatalf("before: %d", st)
	}
	if err := e.Ctl.Store.DB().Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, true)`, known+1).Error; err != nil {
		t.Fatal(err)
	}
	var body string
	testwait.For(t, 10*time.Second, "a route of the newer build answered 501", func() bool {
		var st int
		st, body = newer()
		return st == http.StatusNotImplemented
	})
	if !strings.Contains(body, "the store is at") {
		t.Fatalf("the 501 does not say why: %s", body)
	}
}
