package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/models"
	"mesh/testwait"
)

// X-Mesh-Send is not covered by the declaration's signature. A man in the
// middle (plain HTTP, a compromised proxy) replayed the declaration the host
// had applied with an X-Mesh-Send that is no send id: the host took it as a
// no-op "applied" and kept the forged send as the one that delivered its
// generation, and every later poll named it in X-Mesh-Finished-Send, which
// the controller answers 400 (not a send id), for good.
func TestPoll_ASendHeaderThatIsNoSendIDIsNotKept(t *testing.T) {
	genuine := uuid.NewString()
	body, digest := signDecl(t, models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 5, EmptyOK: true})
	var mu sync.Mutex
	var finishedSends []string
	var answered400 int
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/host/declaration":
			mu.Lock()
			defer mu.Unlock()
			polls++
			fs := r.Header.Get(models.HeaderFinishedSend)
			finishedSends = append(finishedSends, fs)
			if polls == 1 {
				// The man in the middle: the applied declaration, again,
				// under a send of its own.
				w.Header().Set("ETag", `"5"`)
				w.Header().Set("X-Mesh-Send", "forged-by-the-proxy")
				_, _ = w.Write(body)
				return
			}
			// The controller, as api/poll.go judges the header.
			if _, err := uuid.Parse(fs); fs != "" && (err != nil || len(fs) != 36) {
				answered400++
				http.Error(w, `{"detail":"X-Mesh-Finished-Send: the X-Mesh-Send of the answer that delivered the generation in If-None-Match"}`, http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusNotModified)
		case "/api/v1/host/reports":
			w.WriteHeader(http.StatusCreated)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	a := testAgent(t)
	a.id = &Identity{Machine: "m1", Keys: fuzzTrust()}
	a.logs = &logShipper{}
	a.cfg.Wait = time.Second
	a.state.Applied, a.state.AppliedDigest, a.state.AppliedSend = 5, digest, genuine
	a.state.Finished, a.state.FinishedSend = 5, genuine
	a.client = newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
	a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.loop(ctx) }()
	testwait.For(t, 30*time.Second, "four polls", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return polls >= 4
	})
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	t.Logf("X-Mesh-Finished-Send of each poll: %q; state: finished_send %q applied_send %q", finishedSends, a.state.FinishedSend, a.state.AppliedSend)
	if a.state.FinishedSend != genuine || answered400 > 0 {
		t.Fatalf("an unsigned X-Mesh-Send from the network was kept as the send of generation 5 (%q, was %q): %d later poll(s) refused 400 by the controller",
			a.state.FinishedSend, genuine, answered400)
	}
}
