package agent

import (
	"archive/tar"
	"context"
	"crypto/ed25519"
	"encoding/json"
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
