package api_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestIdlePolls_NoStatements: a poll that finds nothing new never touches
// the store. Hundreds of idle polls, held (in place and parked) and timed
// out, issue zero statements; last-seen is flushed later, in one statement
// for all. (The instance's own periodic work is set aside for the count.)
func TestIdlePolls_NoStatements(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d, ctltest.Options{FlushEvery: time.Hour, HeartbeatEvery: time.Hour, RolloutEvery: time.Hour, ResyncEvery: time.Hour})
			const hosts = 20
			tokens, sends := make([]string, hosts), make([]string, hosts)
			for i := range tokens {
				en := e.Enroll("m" + string(rune('a'+i)))
				tokens[i] = en.Token
				p := doPoll(e, en.Token, 0, "0s")
				if p.status != 200 {
					t.Fatalf("first poll: %d", p.status)
				}
				// The same version and schema as every later poll: nothing
				// to record. Later polls name this send as the one their
				// host finished with, as a host does: this instance wrote
				// it, so it asks the store nothing of it.
				sends[i] = p.send
			}
			waitFor(t, 10*time.Second, func() bool { return e.Ctl.Hub.Settled() })
			before := e.Ctl.Store.Statements()
			var wg sync.WaitGroup
			for i, tok := range tokens {
				wg.Add(1)
				go func() {
					defer wg.Done()
					idle := func(wait string) poll {
						start := time.Now()
						resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=" + wait, Token: tok,
							Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1", "If-None-Match": `"1"`, "X-Mesh-Finished-Send": sends[i]}})
						return poll{status: resp.StatusCode, body: b, took: time.Since(start)}
					}
					for range 10 {
						if p := idle("0s"); p.status != 304 {
							t.Errorf("idle poll: %d %s", p.status, p.body)
						}
					}
					if p := idle("50ms"); p.status != 304 {
						t.Errorf("held idle poll: %d", p.status)
					}
					if p := idle("1100ms"); p.status != 304 || p.took < time.Second {
						t.Errorf("parked idle poll: %d after %v", p.status, p.took)
					}
				}()
			}
			wg.Wait()
			if n := e.Ctl.Store.Statements() - before; n != 0 {
				t.Fatalf("%d idle polls issued %d statement(s); want 0", hosts*12, n)
			}
			// The flush is one statement for all of them.
			before = e.Ctl.Store.Statements()
			e.Ctl.Hub.FlushSeen()
			if n := e.Ctl.Store.Statements() - before; n != 1 {
				t.Fatalf("last-seen flush issued %d statements; want 1", n)
			}
		})
	}
}

// TestBumps_ComposedOnce: a bump reaches the hub twice on PostgreSQL (in
// process after the commit, then by NOTIFY); its machine is composed and
// woken once.
func TestBumps_ComposedOnce(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d)
			const machines = 5
			for i := range machines {
				e.Enroll(fmt.Sprintf("m%d", i))
			}
			waitFor(t, 10*time.Second, func() bool { return e.Ctl.Hub.Settled() })
			heard, composed := e.Ctl.Hub.Heard(), e.Ctl.Hub.ComposedAhead()
			for i := range machines {
				firstVariables(e, fmt.Sprintf("m%d", i))
			}
			times := int64(1)
			if d == store.Postgres {
				times = 2
			}
			waitFor(t, 10*time.Second, func() bool {
				return e.Ctl.Hub.Heard()-heard == times*machines && e.Ctl.Hub.Settled()
			})
			if n := e.Ctl.Hub.ComposedAhead() - composed; n != machines {
				t.Fatalf("%d bumps heard %d times each: %d machines composed ahead, want %d", machines, times, n, machines)
			}
		})
	}
}

// TestLastSeen_TheHostsOwnTime: the flush writes each machine's own
// last-seen time. It wrote the time of the flush for all, so a host that
// died just after one was shown as seen until the next, up to 30 s after
// it was gone (and the hub took the store's later time over its own).
// A time older than the stored one never moves it back.
func TestLastSeen_TheHostsOwnTime(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d, ctltest.Options{FlushEvery: time.Hour})
			en := e.Enroll("m1")
			if p := doPoll(e, en.Token, 0, "0s"); p.status != 200 {
				t.Fatalf("first poll: %d", p.status)
			}
			ctx := context.Background()
			m, err := e.Ctl.Store.Machine(ctx, "m1")
			if err != nil {
				t.Fatal(err)
			}
			seen := e.Ctl.Hub.LastSeen(m.ID)
			if seen == nil {
				t.Fatal("the hub has no last-seen time after a poll")
			}
			e.Ctl.Hub.FlushSeen()
			m, _ = e.Ctl.Store.Machine(ctx, "m1")
			// PostgreSQL keeps microseconds.
			if m.LastSeen == nil || m.LastSeen.Sub(*seen).Abs() >= time.Microsecond {
				t.Fatalf("stored last seen %v, the host was last seen at %v", m.LastSeen, seen)
			}
			if err := e.Ctl.Store.FlushLastSeen(ctx, []store.Seen{{ID: m.ID, At: seen.Add(-time.Minute)}}); err != nil {
				t.Fatal(err)
			}
			if again, _ := e.Ctl.Store.Machine(ctx, "m1"); !again.LastSeen.Equal(*m.LastSeen) {
				t.Fatalf("an older time moved last seen back: %v, was %v", again.LastSeen, m.LastSeen)
			}
		})
	}
}

// TestIdlePolls_NoStatementsAfterHostInfoRecorded: a host that upgraded
// has its new version recorded by its first poll saying it; the polls
// after it, saying the same and finding nothing new, touch the store no
// more. On PostgreSQL the instance heard its own notification that the
// host's info was recorded, forgot it, and wrote it again at the next
// idle poll.
func TestIdlePolls_NoStatementsAfterHostInfoRecorded(t *testing.T) {
	e := ctltest.Start(t, store.Postgres, ctltest.Options{FlushEvery: time.Hour, HeartbeatEvery: time.Hour, RolloutEvery: time.Hour, ResyncEvery: time.Hour})
	en := e.Enroll("m1")
	first := doPoll(e, en.Token, 0, "0s")
	if first.status != 200 {
		t.Fatalf("first poll: %d", first.status)
	}
	waitFor(t, 10*time.Second, func() bool { return e.Ctl.Hub.Settled() })
	idle := func(version, wait string) poll {
		resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=" + wait, Token: en.Token,
			Header: map[string]string{"X-Mesh-Host-Version": version, "X-Mesh-Schema": "1", "If-None-Match": `"1"`, "X-Mesh-Finished-Send": first.send}})
		return poll{status: resp.StatusCode, body: b}
	}
	if p := idle("1.1.0", "0s"); p.status != 304 { // its first poll as 1.1.0 records it
		t.Fatalf("poll as 1.1.0: %d %s", p.status, p.body)
	}
	waitFor(t, 10*time.Second, func() bool { return e.Ctl.Hub.Settled() })
	before := e.Ctl.Store.Statements()
	for i := range 5 {
		if p := idle("1.1.0", "100ms"); p.status != 304 {
			t.Fatalf("idle poll %d as 1.1.0: %d %s", i, p.status, p.body)
		}
		if n := e.Ctl.Store.Statements() - before; n != 0 {
			t.Fatalf("idle poll %d as 1.1.0 (already recorded) issued %d statement(s); want 0", i, n)
		}
	}
}
