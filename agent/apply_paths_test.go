package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// TestApply_PathHandedToAnotherResourceSurvives: a resource renamed (or
// its module) at the same path — the next generation names new.conf at
// old.conf's path and new.tree at old.tree's — keeps what the new one
// wrote there: removing the resource no longer named must not delete it.
func TestApply_PathHandedToAnotherResourceSurvives(t *testing.T) {
	a := testAgent(t)
	old := "v=1\n"
	st := a.state.clone()
	if _, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 1, Resources: []models.Resource{
		{ID: "old.conf", Module: "old", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &old},
		{ID: "old.tree", Module: "old", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "1"}))}},
		{ID: "old.moved", Module: "old", Build: 1, Kind: "file", Path: "/etc/a", Content: &old},
		{ID: "old.other", Module: "old", Build: 1, Kind: "file", Path: "/etc/b", Content: &old},
	}}, st); err != nil {
		t.Fatal(err)
	}
	a.state = st
	nw := "v=2\n"
	treeDigest := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "2"}))
	st = a.state.clone()
	acts, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "new.conf", Module: "new", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &nw},
		{ID: "new.tree", Module: "new", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: treeDigest}},
		// Two resources swap their paths.
		{ID: "old.moved", Module: "old", Build: 1, Kind: "file", Path: "/etc/b", Content: &nw},
		{ID: "old.other", Module: "old", Build: 1, Kind: "file", Path: "/etc/a", Content: &nw},
	}}, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ path, want string }{{"etc/app.conf", nw}, {"opt/app/bin/run", "2"}, {"etc/a", nw}, {"etc/b", nw}} {
		if b, err := os.ReadFile(filepath.Join(a.root.dir, f.path)); err != nil || string(b) != f.want {
			t.Errorf("/%s: %q %v, want %q (actions %+v)", f.path, b, err, f.want, acts)
		}
	}
	words := ""
	for _, act := range acts {
		words += act.Words() + "\n"
	}
	if !strings.Contains(words, "forgotten old.conf (old): /etc/app.conf is new.conf's now") {
		t.Errorf("the old resource's end is not said as it is:\n%s", words)
	}
}

// TestVerify_TwoResourcesAtOnePathRefused: each would overwrite the other.
func TestVerify_TwoResourcesAtOnePathRefused(t *testing.T) {
	c := "x"
	d := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 1, Resources: []models.Resource{
		{ID: "a.conf", Module: "a", Build: 1, Kind: "file", Path: "/etc/x.conf", Content: &c},
		{ID: "b.tree", Module: "b", Build: 1, Kind: "tree", Path: "/etc/x.conf", Artifact: &models.Artifact{Digest: models.DigestOf([]byte("t"))}},
	}}
	if err := checkResources(d, []string{"/"}); err == nil || !strings.Contains(err.Error(), "a.conf and b.tree both declare the path /etc/x.conf") {
		t.Fatalf("got %v", err)
	}
}
