package api_test

import (
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// heldPollDuringSendCommit holds a poll in place (wait under a second: not
// parked, so no fan-out claims it), commits a change, and keeps the send
// row's commit waiting (the sends table locked by another transaction, as
// a slow commit under load would) while during(e) runs; then lets it go
// and returns the held poll's answer.
func heldPollDuringSendCommit(t *testing.T, e *ctltest.Env, token string, known int64, during func()) poll {
	return pollDuringSendCommit(t, e, token, known, "900ms", during)
}

func pollDuringSendCommit(t *testing.T, e *ctltest.Env, token string, known int64, wait string, during func()) poll {
	t.Helper()
	tx := e.Ctl.Store.DB().Begin()
	if tx.Error != nil {
		t.Fatal(tx.Error)
	}
	if err := tx.Exec("LOCK TABLE sends IN EXCLUSIVE MODE").Error; err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			tx.Rollback()
		}
	}
	defer release()
	done := make(chan poll, 1)
	go func() { done <- doPoll(e, token, known, wait) }()
	waitFor(t, 10*time.Second, func() bool { return e.Ctl.Hub.OpenPolls() >= 1 }) // the poll is held
	firstVariables(e, "m1")                                                       // a new generation: the held poll wakes and writes its send row
	// Its send row waits on the lock.
	waitFor(t, 10*time.Second, func() bool {
		var n int64
		e.Ctl.Store.DB().Raw(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%sends%'`).Scan(&n)
		return n > 0
	})
	during()
	release()
	select {
	case p := <-done:
		return p
	case <-time.After(30 * time.Second):
		t.Fatal("the held poll was not answered")
		return poll{}
	}
}

// TestPollPath_RevokedDuringSendCommitIsNotSent: a machine revoked while
// its held poll's send row committed was sent its declaration anyway: the
// poll checked the revocation only before the row was written
// (recordSend), never after, where the fan-out's claimed polls are checked
// again (answerClaims). A host whose enrolment an admin revoked (the API said
// 200, its token already refused) still receives a signed declaration.
func TestPollPath_RevokedDuringSendCommitIsNotSent(t *testing.T) {
	e := ctltest.Start(t, store.Postgres)
	en := e.Enroll("m1")
	_, gen := sendPoll(t, e, en.Token, 0)
	p := heldPollDuringSendCommit(t, e, en.Token, gen, func() {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/revoke", Token: e.Admin, Body: map[string]any{"reason": "stolen"}}, 200, nil)
		// Its token is refused from here on.
		if resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/ca", Token: en.Token}); resp.StatusCode != 401 {
			t.Errorf("the revoked host's token after the revoke: %d, want 401", resp.StatusCode)
		}
	})
	if p.status == 200 {
		t.Fatalf("a poll of a machine revoked (revoke answered 200) before its bytes left was sent generation %s (send %s); want 401", p.etag, p.send)
	}
}

// TestPollPath_SupersededDuringSendCommitIsNotSent: a newer poll of the
// same machine arriving while a held poll's send row commits supersedes
// it, yet the superseded poll was sent the declaration too (and the newer
// one as well): two send rows and two 200s for one generation, where a
// superseded poll is answered 304.
func TestPollPath_SupersededDuringSendCommitIsNotSent(t *testing.T) {
	e := ctltest.Start(t, store.Postgres)
	en := e.Enroll("m1")
	_, gen := sendPoll(t, e, en.Token, 0)
	second := make(chan poll, 1)
	p := heldPollDuringSendCommit(t, e, en.Token, gen, func() {
		go func() { second <- doPoll(e, en.Token, gen, "900ms") }()
		// The newer poll has superseded the held one when it is counted
		// as its machine's open poll.
		waitFor(t, 10*time.Second, func() bool { return e.Ctl.Hub.OpenPolls() >= 2 })
	})
	q := <-second
	if p.status == 200 {
		t.Fatalf("the superseded poll was sent generation %s (send %s); the newer poll got %d %s (send %s); want the older 304",
			p.etag, p.send, q.status, q.etag, q.send)
	}
}

// Held: a parked poll claimed by the fan-out and revoked while the
// chunk's transaction commits is answered 401 (answerClaims looks again).
func TestPollPath_ParkedRevokedDuringSendCommitIsNotSent(t *testing.T) {
	e := ctltest.Start(t, store.Postgres)
	en := e.Enroll("m1")
	_, gen := sendPoll(t, e, en.Token, 0)
	p := pollDuringSendCommit(t, e, en.Token, gen, "5s", func() {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/revoke", Token: e.Admin, Body: map[string]any{"reason": "stolen"}}, 200, nil)
	})
	if p.status == 200 {
		t.Fatalf("parked poll of a revoked machine was sent generation %s", p.etag)
	}
}
