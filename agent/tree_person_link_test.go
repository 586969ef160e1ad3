package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// TestTree_APersonsSymlinkAtItsPathIsNotReplaced: a symlink a person put
// at a path (a deploy tool's current → releases/v3) was taken for a tree
// link of mesh's, because it was a symlink: a tree declared there replaced
// it, reported "created", and would have removed it with the tree. It now
// fails the declaration before anything changed, as a file or directory
// of a person's there does.
func TestTree_APersonsSymlinkAtItsPathIsNotReplaced(t *testing.T) {
	a := testAgent(t)
	if err := os.MkdirAll(filepath.Join(a.root.dir, "opt/releases/v3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("releases/v3", filepath.Join(a.root.dir, "opt/current")); err != nil {
		t.Fatal(err)
	}
	digest := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "2"}))
	decl := func(gen int64) *models.DeclarationPayload {
		return &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: gen, Resources: []models.Resource{
			{ID: "c.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/current", Artifact: &models.Artifact{Digest: digest}},
		}}
	}
	st := a.state.clone()
	acts, err := a.applyInFull(context.Background(), decl(1), st)
	if target, _ := os.Readlink(filepath.Join(a.root.dir, "opt/current")); target != "releases/v3" {
		t.Fatalf("the person's symlink /opt/current → releases/v3 was replaced (now → %q); apply err=%v actions=%+v", target, err, acts)
	}
	if err == nil || !strings.Contains(err.Error(), "symlink mesh did not make") {
		t.Fatalf("the apply over a person's symlink: %v, want it refused saying why", err)
	}

	// Moved away, the tree goes there; applied again, its own link is kept.
	if err := os.Remove(filepath.Join(a.root.dir, "opt/current")); err != nil {
		t.Fatal(err)
	}
	for gen := int64(2); gen <= 3; gen++ {
		st := a.state.clone()
		if _, err := a.applyInFull(context.Background(), decl(gen), st); err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		a.state = st
	}
	if !a.root.treeLive("/opt/current", digest) {
		t.Fatal("the tree is not live at /opt/current")
	}
}
