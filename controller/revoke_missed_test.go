package controller_test

import (
	"net/http"
	"testing"
	"time"

	"mesh/controller/ctltest"
)

// TestMachineCerts_RevocationNotHeardIsFoundByTheHeartbeat: on
// PostgreSQL, a revocation whose notification an instance never heard (its
// listener was away, and its read of the store after the reconnect failed)
// is found by its heartbeat's read of the store: the machine is refused
// there, and its poll parked there before is closed 401 rather than left
// open until its wait runs out. The revocation is written here as a
// notification lost on the way leaves it: in the store, with no NOTIFY.
func TestMachineCerts_RevocationNotHeardIsFoundByTheHeartbeat(t *testing.T) {
	a, _, onB, done := parkedOnAnotherReplica(t, ctltest.Options{TLS: true, HeartbeatEvery: 200 * time.Millisecond})
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
