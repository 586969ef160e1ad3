package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
	"mesh/testwait"
)

// countParked counts the "parked poll" errors the server logs.
type countParked struct {
	slog.Handler
	n *atomic.Int64
}

func (h countParked) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "parked poll") {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

// parkedPoll starts a controller with m1 enrolled and its first generation
// applied; park starts m1's poll for a newer one, waiting wait, and returns
// once it is parked (its answer comes on the channel).
func parkedPoll(t *testing.T) (e *ctltest.Env, m *models.Machine, park func(wait string) <-chan keptPoll) {
	e = ctltest.Start(t, store.SQLite)
	en := e.Enroll("m1")
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	if first := pollOn(t, hc, e, en.Token, 0, "0s", false); first.status != 200 {
		t.Fatalf("first poll: %d", first.status)
	}
	m, err := e.Ctl.Store.Machine(context.Background(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	return e, m, func(wait string) <-chan keptPoll {
		done := make(chan keptPoll, 1)
		go func() { done <- pollOn(t, hc, e, en.Token, 1, wait, false) }()
		testwait.For(t, 10*time.Second, "the poll parked", func() bool { return e.Ctl.Hub.ParkedOn("m1") })
		return done
	}
}

// TestParkedPoll_StoreFailsWhenWoken: a parked poll woken while the store
// fails waits on for the next change or its deadline (a 304), having asked
// the store once — not put straight back on the workers' queue to ask
// again, which spun a worker per poll until the deadline and, with enough
// such polls, filled the queue the workers themselves send to.
func TestParkedPoll_StoreFailsWhenWoken(t *testing.T) {
	e, m, park := parkedPoll(t)
	var errs atomic.Int64
	e.Ctl.Server.Log = slog.New(countParked{Handler: e.Ctl.Server.Log.Handler(), n: &errs})

	done := park("3s")
	db, err := e.Ctl.Store.DB().DB()
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close() // every query fails from here on
	e.Ctl.Hub.SetHead(m.ID, m.Generation+1, false)

	var p keptPoll
	select {
	case p = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the parked poll was not answered")
	}
	if p.status != 304 {
		t.Fatalf("the poll woken while the store fails: %d, want 304 at its deadline", p.status)
	}
	if n := errs.Load(); n < 1 || n > 2 {
		t.Fatalf("the woken poll asked the failing store %d times, want once", n)
	}
}

// TestParkedPoll_RevokedWhileHeld: a machine's enrolment revoked while its
// poll was not in the hub's parked list (a worker held it, or it was about
// to park, when the revocation closed the parked ones) is never sent a
// declaration: the next change answers it 401, and it says why.
func TestParkedPoll_RevokedWhileHeld(t *testing.T) {
	e, m, park := parkedPoll(t)
	done := park("30s")
	// Refused from now on, as a revocation does first; the parked polls
	// are not closed here, as they would not be for one a worker held.
	e.Ctl.Server.Auth.Revoked.Add([]models.Revocation{{TokenID: m.TokenID, ExpiresAt: time.Now().Add(time.Hour)}})
	firstVariables(e, "m1")
	var p keptPoll
	select {
	case p = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the parked poll was not answered")
	}
	if p.status != 401 || !strings.Contains(p.body, "revoked") {
		t.Fatalf("a revoked machine's woken poll: %d %s", p.status, p.body)
	}
}
