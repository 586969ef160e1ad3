package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/models"
	"mesh/testwait"
)

// TestPoll_OversizeDeclarationRefusedAndReported: a 200 whose body is over
// the size cap is a declaration refused unread — reported (naming no send
// or generation it could not trust) and journaled — not a failed poll
// made again without a word to anyone; and asked again ever more slowly.
func TestPoll_OversizeDeclarationRefusedAndReported(t *testing.T) {
	var mu sync.Mutex
	var reports []models.Report
	var polls []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/host/declaration":
			mu.Lock()
			polls = append(polls, time.Now())
			mu.Unlock()
			w.Header().Set("ETag", `"9"`)
			w.Header().Set("X-Mesh-Send", "0193b1f2-0000-7000-8000-000000000009")
			_, _ = w.Write([]byte(strings.Repeat(" ", MaxDeclaration+1)))
		case "/api/v1/host/reports":
			b, _ := io.ReadAll(r.Body)
			var rep models.Report
			_ = json.Unmarshal(b, &rep)
			mu.Lock()
			reports = append(reports, rep)
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	a := testAgent(t)
	a.id = &Identity{Machine: "m1", Keys: fuzzTrust()}
	a.logs = &logShipper{}
	a.client = newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
	a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.loop(ctx) }()
	defer func() { cancel(); <-done }()

	var got models.Report
	testwait.For(t, 20*time.Second, "a refused report", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range reports {
			if r.Outcome == models.OutcomeRefused {
				got = r
				return true
			}
		}
		return false
	})
	if got.Send != "" || got.Generation != 0 || !strings.Contains(got.Reason, "larger than the size cap") || !strings.Contains(got.Reason, "send 0193b1f2-0000-7000-8000-000000000009, generation 9 claimed") {
		t.Fatalf("the refusal: %+v", got)
	}
	testwait.For(t, 10*time.Second, "the refusal journaled", func() bool {
		j, _ := ReadJournal(a.cfg.StateDir)
		return len(j) > 0 && j[len(j)-1].Outcome == models.OutcomeRefused
	})
	// Asked again, it is asked ever more slowly (1 s, then 2, …): each
	// is the same body again, a send row and a report.
	testwait.For(t, 20*time.Second, "three polls", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(polls) >= 3
	})
	mu.Lock()
	first, second := polls[1].Sub(polls[0]), polls[2].Sub(polls[1])
	mu.Unlock()
	if second <= first {
		t.Fatalf("asked again after %v, then after %v: not backing off", first, second)
	}
	cancel()
	<-done
	if a.state.Finished != 0 {
		t.Fatalf("an unread declaration counted as finished: %d", a.state.Finished)
	}
}
