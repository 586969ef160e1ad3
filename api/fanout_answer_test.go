package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"mesh/controller/ctltest"
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
				e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + n + "/variables", Token: e.Admin,
					Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"port": "9000"}}}, 200, nil)
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
