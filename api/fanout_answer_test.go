package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/hub"
	"mesh/models"
	"mesh/store"
	"mesh/testwait"
)

// TestFanout_ParkedPollsSentWithTheirDeclarations: the parked polls a
// change wakes are answered by the goroutine that composed their
// declarations, their send rows written in the same transaction: every
// host gets a 200 that verifies, whose send (X-Mesh-Send) is on the record
// with the generation and digest it carried, and none of those rows went
// through the send writer's own transactions.
func TestFanout_ParkedPollsSentWithTheirDeclarations(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d)
			const hosts = 12
			names := make([]string, hosts)
			tokens := make([]string, hosts)
			enrolled := make([]ctltest.Enrolled, hosts)
			for i := range hosts {
				names[i] = fmt.Sprintf("m%d", i)
				enrolled[i] = e.Enroll(names[i])
				tokens[i] = enrolled[i].Token
				if p := doPoll(e, tokens[i], 0, "0s"); p.status != 200 {
					t.Fatalf("first poll: %d", p.status)
				}
			}
			testwait.For(t, 10*time.Second, "the enrolments composed", e.Ctl.Hub.Settled)
			hc := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(hc.CloseIdleConnections)
			type answered struct {
				host int
				keptPoll
			}
			done := make(chan answered, hosts)
			for i, tok := range tokens {
				go func() { done <- answered{i, pollOn(t, hc, e, tok, 1, "30s", false)} }()
			}
			testwait.For(t, 10*time.Second, "every poll parked", func() bool {
				for _, n := range names {
					if !e.Ctl.Hub.ParkedOn(n) {
						return false
					}
				}
				return true
			})
			withDecl, written := e.Ctl.Hub.SentWithDeclaration(), e.Ctl.Server.Sends.Written()
			for _, n := range names {
				firstVariables(e, n)
			}
			for range hosts {
				var p answered
				select {
				case p = <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("a parked poll was not answered")
				}
				if p.status != 200 || p.send == "" {
					t.Fatalf("a woken poll: %d, send %q", p.status, p.send)
				}
				row, err := e.Ctl.Store.Send(context.Background(), p.send)
				if err != nil || fmt.Sprintf(`"%d"`, row.Generation) != p.etag {
					t.Fatalf("send %s: row %+v (%v), answer's generation %s", p.send, row, err, p.etag)
				}
				var env models.Envelope
				if err := json.Unmarshal([]byte(p.body), &env); err != nil {
					t.Fatal(err)
				}
				verify(t, enrolled[p.host], []byte(p.body))
				if models.DigestOf(env.Payload) != row.Digest || row.MachineID == 0 {
					t.Fatalf("send %s: row's digest %s, the bytes' %s", p.send, row.Digest, models.DigestOf(env.Payload))
				}
			}
			if n := e.Ctl.Hub.SentWithDeclaration() - withDecl; n != hosts {
				t.Fatalf("%d of %d woken polls sent with their declarations", n, hosts)
			}
			if n := e.Ctl.Server.Sends.Written() - written; n != hosts {
				t.Fatalf("mesh_sends_total counted %d sends of %d", n, hosts)
			}
		})
	}
}

// TestFanout_ClaimedPollOvertaken: a parked poll claimed by the goroutine
// composing its declaration is answered as any woken poll would be when,
// before its send row is written or after, a newer poll of its machine
// supersedes it (304: one 200 a change, on the host's newest poll) or the
// instance begins to drain (503: its host moves on).
func TestFanout_ClaimedPollOvertaken(t *testing.T) {
	for _, c := range []struct {
		name string
		when string // "claim": before the send row; "answer": after it
		do   func(e *ctltest.Env, cl hub.Claim)
		want int
	}{
		{"superseded before its send row", "claim", func(e *ctltest.Env, cl hub.Claim) { cl.Poll.(hub.Poll).Supersede() }, 304},
		{"superseded after its send row", "answer", func(e *ctltest.Env, cl hub.Claim) { cl.Poll.(hub.Poll).Supersede() }, 304},
		{"draining before its send row", "claim", func(e *ctltest.Env, cl hub.Claim) { e.Ctl.Server.Drain() }, 503},
		{"draining after its send row", "answer", func(e *ctltest.Env, cl hub.Claim) { e.Ctl.Server.Drain() }, 503},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := ctltest.Start(t, store.SQLite)
			en := e.Enroll("m1")
			if p := doPoll(e, en.Token, 0, "0s"); p.status != 200 {
				t.Fatalf("first poll: %d", p.status)
			}
			testwait.For(t, 10*time.Second, "the enrolment composed", e.Ctl.Hub.Settled)
			hc := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(hc.CloseIdleConnections)
			done := make(chan keptPoll, 1)
			go func() { done <- pollOn(t, hc, e, en.Token, 1, "30s", false) }()
			testwait.For(t, 10*time.Second, "the poll parked", func() bool { return e.Ctl.Hub.ParkedOn("m1") })
			var claimed atomic.Int64
			if c.when == "claim" {
				claim := e.Ctl.Hub.Claim
				e.Ctl.Hub.Claim = func(ps []hub.Parked) []hub.Claim {
					cls := claim(ps)
					for _, cl := range cls {
						claimed.Add(1)
						c.do(e, cl)
					}
					return cls
				}
			} else {
				answer := e.Ctl.Hub.Answer
				e.Ctl.Hub.Answer = func(cls []hub.Claim) {
					for _, cl := range cls {
						if cl.Send != nil {
							claimed.Add(1)
							c.do(e, cl)
						}
					}
					answer(cls)
				}
			}
			sends, err := e.Ctl.Store.CountSends(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			firstVariables(e, "m1")
			var p keptPoll
			select {
			case p = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the claimed poll was not answered")
			}
			if n := claimed.Load(); n != 1 || p.status != c.want || p.send != "" {
				t.Fatalf("claimed %d; the poll answered %d (send %q), want %d with no send", n, p.status, p.send, c.want)
			}
			after, err := e.Ctl.Store.CountSends(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// Before its row: none written. After: the row stays on the
			// record, its bytes never sent (harmless; the reverse is not).
			if want := map[string]int64{"claim": 0, "answer": 1}[c.when]; after-sends != want {
				t.Fatalf("%d send rows written, want %d", after-sends, want)
			}
		})
	}
}
