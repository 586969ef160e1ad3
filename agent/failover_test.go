package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// failoverHost is a host of m1 whose first controller is served by bad and
// whose second is up, answering every poll 304; it returns how many polls
// reached the second once the host has run until then (or 8 s).
func failoverHost(t *testing.T, bad http.HandlerFunc) int64 {
	t.Helper()
	first := httptest.NewServer(bad)
	defer first.Close()
	var polls atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	second := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/host/declaration" && polls.Add(1) == 1 {
			cancel()
		}
		w.WriteHeader(http.StatusNotModified)
	}))
	defer second.Close()
	a := testAgent(t)
	a.id = &Identity{Machine: "m1", Keys: fuzzTrust()}
	a.logs = &logShipper{}
	a.cfg.Wait = time.Second
	a.client = newClient(&Identity{Controllers: []string{first.URL, second.URL}, Token: "t"})
	a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
	_ = a.loop(ctx)
	return polls.Load()
}

// TestPoll_FailsOverFromAControllerAnswering5xx: a host's first controller
// answers every poll 502 (a proxy whose controller is down), 500 or 504:
// only a 503 moved the poll to the next controller, so the host asked the
// first one again and again, backing off, and never reached the second,
// which was up (its reports moved on any 5xx).
func TestPoll_FailsOverFromAControllerAnswering5xx(t *testing.T) {
	for _, status := range []int{http.StatusBadGateway, http.StatusInternalServerError, http.StatusGatewayTimeout} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			if failoverHost(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "upstream down", status) }) == 0 {
				t.Fatalf("in 8 s the host never polled the controller that is up past one answering %d", status)
			}
		})
	}
}

// TestPoll_FailsOverFromAControllerCuttingBodies: the first controller
// answers 200 and cuts the connection mid-body every time; the poll's own
// comment said the next controller is then tried, and it was not.
func TestPoll_FailsOverFromAControllerCuttingBodies(t *testing.T) {
	if failoverHost(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Header().Set("ETag", `"9"`)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"payload": "`))
		w.(http.Flusher).Flush()
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}) == 0 {
		t.Fatal("in 8 s the host never polled the controller that is up past one cutting its answers off")
	}
}
