package api_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// twoInstances starts two instances on one PostgreSQL and enrols m1
// through b, its host to poll b; a knows m1 too (as its resync would).
func twoInstances(t *testing.T) (a, b *ctltest.Env, en ctltest.Enrolled) {
	t.Helper()
	cfg := storetest.Config(t, store.Postgres)
	a = ctltest.StartWith(t, cfg)
	b = ctltest.StartWith(t, cfg)
	b.Admin = a.Admin // one token key in the store: every instance accepts it
	en = b.Enroll("m1")
	if err := a.Ctl.Hub.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a, b, en
}

// TestWakeAcrossInstances: two instances on one PostgreSQL; a change
// committed through one wakes a poll held by the other (NOTIFY in the
// bumping transaction, LISTEN in every instance), and both send the same
// bytes for one generation.
func TestWakeAcrossInstances(t *testing.T) {
	a, b, en := twoInstances(t)
	if p := doPoll(b, en.Token, 0, "1s"); p.status != 200 {
		t.Fatalf("first poll on b: %d", p.status)
	}
	var wg sync.WaitGroup
	var woke poll
	wg.Add(1)
	go func() { defer wg.Done(); woke = doPoll(b, en.Token, 1, "30s") }()
	waitFor(t, 5*time.Second, func() bool { return b.Ctl.Hub.Polling("m1") })
	// The enrolment bumped m1 to generation 1, and b composes that ahead
	// too (the host enrolled there) in its run loop, which can finish after
	// the polls above: counted from here it made b's count 2. Count only
	// the change's composes.
	waitFor(t, 5*time.Second, func() bool { return a.Ctl.Hub.Settled() && b.Ctl.Hub.Settled() })
	aheadA, aheadB := a.Ctl.Hub.ComposedAhead(), b.Ctl.Hub.ComposedAhead()
	changed := time.Now()
	a.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: a.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"x": "1"}}}, 200, nil)
	wg.Wait()
	if woke.status != 200 || woke.etag != `"2"` {
		t.Fatalf("poll on b after a change on a: %d %s", woke.status, woke.etag)
	}
	if lag := time.Since(changed); lag > 5*time.Second {
		t.Fatalf("woken %v after the change", lag)
	}
	// The instance the host polls composed it ahead; the one that made the
	// change but holds no poll for it did not (it composes on demand).
	waitFor(t, 5*time.Second, func() bool { return a.Ctl.Hub.Settled() && b.Ctl.Hub.Settled() })
	if da, db := a.Ctl.Hub.ComposedAhead()-aheadA, b.Ctl.Hub.ComposedAhead()-aheadB; da != 0 || db != 1 {
		t.Fatalf("composed ahead: %d on a (no poll there), %d on b (the poll); want 0 and 1", da, db)
	}
	other := doPoll(a, en.Token, 1, "1s")
	if other.status != 200 || string(other.body) != string(woke.body) {
		t.Fatal("two instances sent different bytes for one generation")
	}
}

// TestRevocationAcrossInstances: a token revoked through one instance is
// refused by the other at once (NOTIFY), without a restart.
func TestRevocationAcrossInstances(t *testing.T) {
	cfg := storetest.Config(t, store.Postgres)
	a := ctltest.StartWith(t, cfg)
	b := ctltest.StartWith(t, cfg)
	tok := a.AddUser("carol", "operator")
	b.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: tok}, 200, nil)
	claims, err := a.Ctl.Server.Auth.ParsePerson(tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Ctl.Store.Revoke(context.Background(), "test", &models.Revocation{TokenID: claims.ID, Kind: models.RevokedSession,
		Reason: "logged out", ExpiresAt: claims.ExpiresAt.Time}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		resp, _ := b.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: tok})
		return resp.StatusCode == 401
	})
}
