package controller_test

import (
	"net/http"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// TestMachineCerts_RevocationNotHeardIsFoundByTheHeartbeat: on
// PostgreSQL, a revocation whose notification an instance never heard (its
// listener was away, and its read of the store after the reconnect failed)
// is found by its heartbeat's read of the store: the machine is refused
// there, and its poll parked there before is closed 401 rather than left
// open until its wait runs out. The revocation is written here as a
// notification lost on the way leaves it: in the store, with no NOTIFY.
func TestMachineCerts_RevocationNotHeardIsFoundByTheHeartbeat(t *testing.T) {
	sc := storetest.Config(t, store.Postgres)
	a := ctltest.StartWith(t, sc, ctltest.Options{TLS: true})
	b := ctltest.StartWith(t, sc, ctltest.Options{TLS: true, HeartbeatEvery: 200 * time.Millisecond})
	b.Admin = a.Admin
	m, _ := enrolWithCert(t, a, "m1")
	c := m.tls(t)
	onB := as(t, b, &c)
	resp, body := poll(onB, "", "0s")
	if resp.StatusCode != 200 {
		t.Fatalf("poll on b: %d %s", resp.StatusCode, body)
	}
	done := make(chan int, 1)
	go func() {
		defer close(done)
		if resp, err := onB.HTTP.Do(mustReq(t, b.URL+"/api/v1/host/declaration?wait=120s", resp.Header.Get("ETag"))); err == nil {
			resp.Body.Close()
			done <- resp.StatusCode
		}
	}()
	testwait.For(t, 10*time.Second, "m1's poll parked on b", func() bool { return b.Ctl.Hub.OpenPolls() > 0 })

	if err := a.Ctl.Store.DB().Exec(`INSERT INTO revocations (token_id, kind, reason, revoked_by, revoked_at, expires_at)
		SELECT token_id, 'machine', 'laptop stolen', 'user:admin', now(), now() + interval '1 day' FROM machines WHERE name = 'm1'`).Error; err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-done:
		if st != http.StatusUnauthorized {
			t.Fatalf("b answered m1's parked poll %d, want 401", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b still holds m1's poll parked from before its revocation, 20 s after it")
	}
	if resp, body := poll(onB, "", "0s"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("b after the revocation: %d %s", resp.StatusCode, body)
	}
}
