package agent

import (
	"archive/tar"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"mesh/models"
)

// fakeServices records what the apply asked of the services.
type fakeServices struct {
	mu      sync.Mutex
	stopped []string
}

func (f *fakeServices) Ensure(ctx context.Context, r models.Resource, digest string) (string, error) {
	return "created", nil
}
func (f *fakeServices) Stop(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, id)
	return nil
}
func (f *fakeServices) Renewed(ctx context.Context, id, signal string) error { return nil }
func (f *fakeServices) Close()                                               {}

// m1Host is a test host for m1 trusting fuzzKey, reporting to srv.
func m1Host(t *testing.T, srv *reportServer) *Agent {
	t.Helper()
	a := agentReportingTo(t, srv)
	a.id = &Identity{Machine: "m1", Keys: fuzzTrust()}
	a.logs = &logShipper{}
	return a
}

func signDecl(t *testing.T, d models.DeclarationPayload) ([]byte, string) {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return envelopeOf(t, b, models.Signature{KeyID: "k1", Sig: ed25519.Sign(fuzzKey, b)}), models.DigestOf(b)
}

// TestApply_RefusedDeclarationChangesNothing: a declaration the host
// refuses (here: its tree's archive has an entry that escapes) is refused
// before anything changed: no service the declaration does not name is
// stopped, no file of it written. The host reports "refused" and finishes
// the generation (it is never retried), so the machine must still be what
// the last applied generation says — trees are staged before step 1.
func TestApply_RefusedDeclarationChangesNothing(t *testing.T) {
	srv := newReportServer(t)
	a := m1Host(t, srv)
	fs := &fakeServices{}
	a.services = fs
	// Generation 5 is applied: a service runs.
	a.state.Applied, a.state.Finished, a.state.AppliedDigest, a.state.AppliedSend = 5, 5, "sha256:d5", "s5"
	a.state.Resources["old.svc"] = &Managed{Kind: "service", Module: "old", Build: 1, Digest: "sha256:svc",
		Resource: &models.Resource{ID: "old.svc", Module: "old", Build: 1, Kind: "service", Command: []string{"/bin/true"}}}

	bad := cacheBlob(t, a, makeTar(t, tarEntry{name: "l", link: "/etc", typ: tar.TypeSymlink}))
	content := "x=1\n"
	env, _ := signDecl(t, models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 6, Resources: []models.Resource{
		{ID: "new.conf", Module: "new", Build: 1, Kind: "file", Path: "/etc/new.conf", Content: &content},
		{ID: "new.tree", Module: "new", Build: 1, Kind: "tree", Path: "/opt/new", Artifact: &models.Artifact{Digest: bad, URL: models.BlobURL(bad)}, After: []string{"new.conf"}},
	}})
	a.handle(context.Background(), &pollResult{body: env, send: "s6", etag: `"6"`})

	rs := srv.reports()
	if len(rs) == 0 || rs[len(rs)-1].Outcome != models.OutcomeRefused {
		t.Fatalf("reports %+v; want generation 6 refused", rs)
	}
	if a.state.Applied != 5 || a.state.Finished != 6 {
		t.Fatalf("applied %d finished %d", a.state.Applied, a.state.Finished)
	}
	var problems []string
	if len(fs.stopped) > 0 {
		problems = append(problems, "stopped "+strings.Join(fs.stopped, ","))
	}
	if a.state.Resources["old.svc"] == nil {
		problems = append(problems, "old.svc dropped from the state")
	}
	if a.state.Resources["new.conf"] != nil {
		problems = append(problems, "new.conf of the refused generation written")
	}
	if len(problems) > 0 && len(rs[len(rs)-1].Actions) == 0 {
		problems = append(problems, "and the refused report carries no actions, so none of this is on the record")
	}
	if len(problems) > 0 {
		t.Fatalf("generation 6 was refused (reported %q), yet: %s", rs[len(rs)-1].Reason, strings.Join(problems, "; "))
	}
}

// TestPoll_NamesTheSendItFinished: once a generation is finished, the
// host's polls name the send that delivered it (X-Mesh-Finished-Send), so
// a store restored from a backup that reused the generation for other
// content can tell (api TestRestore_AGenerationReusedIsAConflict).
func TestPoll_NamesTheSendItFinished(t *testing.T) {
	srv := newReportServer(t)
	a := m1Host(t, srv)
	a.services = &fakeServices{}
	content := "x=1\n"
	env, _ := signDecl(t, models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 6, Resources: []models.Resource{
		{ID: "new.conf", Module: "new", Build: 1, Kind: "file", Path: "/etc/new.conf", Content: &content}}})
	a.handle(context.Background(), &pollResult{body: env, send: "0193b1f2-0000-7000-8000-000000000006", etag: `"6"`})
	if a.state.Finished != 6 || a.state.FinishedSend != "0193b1f2-0000-7000-8000-000000000006" {
		t.Fatalf("finished %d by %q", a.state.Finished, a.state.FinishedSend)
	}
	if st, err := LoadState(a.cfg.StateDir); err != nil || st.FinishedSend != a.state.FinishedSend {
		t.Fatalf("the finished send is not in the state file: %+v %v", st, err)
	}
	got := make(chan http.Header, 1)
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/host/declaration" {
			select {
			case got <- r.Header.Clone():
			default:
			}
		}
		w.WriteHeader(http.StatusNotModified)
	}))
	defer ctl.Close()
	res, err := newClient(&Identity{Controllers: []string{ctl.URL}, Token: "t"}).poll(context.Background(), a.state.Finished, a.state.FinishedSend, 0)
	if err != nil || !res.notModified {
		t.Fatalf("poll: %+v %v", res, err)
	}
	h := <-got
	if h.Get("If-None-Match") != `"6"` || h.Get(models.HeaderFinishedSend) != "0193b1f2-0000-7000-8000-000000000006" {
		t.Fatalf("the poll's headers: %v", h)
	}
}
