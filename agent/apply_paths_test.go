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

// TestApply_TreeTakesTheFilesPath: a file of mesh's moves away from a path
// (or is no longer named) and a tree takes that path in the same
// generation: the tree replaces the file. Staging every tree first must
// not judge the path before the file has gone, and the file's old path,
// claimed by the tree, is left to the tree's swap.
func TestApply_TreeTakesTheFilesPath(t *testing.T) {
	a := testAgent(t)
	v1 := "v=1\n"
	st := a.state.clone()
	if _, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 1, Resources: []models.Resource{
		{ID: "a.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app", Content: &v1},
		{ID: "b.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/other", Content: &v1},
	}}, st); err != nil {
		t.Fatal(err)
	}
	a.state = st
	digest := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "2"}))
	st = a.state.clone()
	acts, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "a.conf", Module: "app", Build: 2, Kind: "file", Path: "/etc/app.conf", Content: &v1},
		{ID: "a.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: digest}},
		{ID: "b.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/other", Artifact: &models.Artifact{Digest: digest}},
	}}, st)
	if err != nil {
		t.Fatalf("apply: %v (actions %+v)", err, acts)
	}
	for _, p := range []string{"opt/app/bin/run", "opt/other/bin/run"} {
		if b, err := os.ReadFile(filepath.Join(a.root.dir, p)); err != nil || string(b) != "2" {
			t.Errorf("/%s: %q %v", p, b, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(a.root.dir, "etc/app.conf")); err != nil || string(b) != v1 {
		t.Errorf("/etc/app.conf: %q %v", b, err)
	}
	// A file mesh never managed is still not replaced.
	if err := os.WriteFile(filepath.Join(a.root.dir, "opt/theirs"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.state = st
	st = a.state.clone()
	if _, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 3, Resources: []models.Resource{
		{ID: "c.tree", Module: "app", Build: 3, Kind: "tree", Path: "/opt/theirs", Artifact: &models.Artifact{Digest: digest}},
	}}, st); err == nil || !strings.Contains(err.Error(), "not a tree mesh manages") {
		t.Fatalf("a tree over a file mesh never managed: %v", err)
	}
}

// TestApply_TreeOverAForeignFileChangesNothing: a tree declared over a file
// mesh never managed fails the declaration before anything changed — as
// any refusal while staging does — not after the resources ordered before
// it were applied.
func TestApply_TreeOverAForeignFileChangesNothing(t *testing.T) {
	a := testAgent(t)
	v1, v2 := "v=1\n", "v=2\n"
	st := a.state.clone()
	if _, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 1, Resources: []models.Resource{
		{ID: "a.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/a.conf", Content: &v1},
	}}, st); err != nil {
		t.Fatal(err)
	}
	a.state = st
	if err := os.MkdirAll(filepath.Join(a.root.dir, "opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.root.dir, "opt/theirs"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	digest := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "2"}))
	st = a.state.clone()
	acts, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "a.conf", Module: "app", Build: 2, Kind: "file", Path: "/etc/a.conf", Content: &v2},
		{ID: "c.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/theirs", Artifact: &models.Artifact{Digest: digest}},
	}}, st)
	if err == nil || !strings.Contains(err.Error(), "not a tree mesh manages") {
		t.Fatalf("apply: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.root.dir, "etc/a.conf")); string(b) != v1 || len(acts) > 0 {
		t.Fatalf("the failing declaration changed the machine first: a.conf=%q actions=%+v", b, acts)
	}
}
