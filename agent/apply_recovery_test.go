package agent

import (
	"mesh/models"
	"os"
	"path/filepath"
	"testing"
)

// TestApply_ARetryAfterATreeGaveWayToAFileBeneathIt: a tree went away
// and a file took a path beneath it; a later resource failed. The first
// attempt removed the tree (its path a real directory now, holding the
// file) but the state still named it: every retry failed removing it,
// "directory not empty".
func TestApply_ARetryAfterATreeGaveWayToAFileBeneathIt(t *testing.T) {
	a := testAgent(t)
	tarb := makeTar(t, tarEntry{name: "bin/run", body: "#!/bin/sh\n", mode: 0o755})
	d := cacheBlob(t, a, tarb)
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}); err != nil {
		t.Fatal(err)
	}
	// A person's file where a later resource needs a directory.
	if err := os.MkdirAll(filepath.Join(a.root.dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.root.dir, "etc/web"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf, web := "c\n", "w\n"
	decl := []models.Resource{
		{ID: "app.conf", Module: "app", Build: 2, Kind: "file", Path: "/opt/app/conf", Content: &conf},
		{ID: "web.conf", Module: "web", Build: 1, Kind: "file", Path: "/etc/web/web.conf", Content: &web},
	}
	if _, err := applyAs(t, a, 2, decl...); err == nil {
		t.Fatal("first attempt should fail on web.conf")
	}
	// The person moves their file away; the retry must now succeed.
	if err := os.Remove(filepath.Join(a.root.dir, "etc/web")); err != nil {
		t.Fatal(err)
	}
	if _, err := applyAs(t, a, 2, decl...); err != nil {
		t.Fatalf("retry after the obstacle went: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/app/conf")); err != nil || string(b) != conf {
		t.Fatalf("conf: %q %v", b, err)
	}
}

// TestApply_TheSameDeclarationAfterTheStateWasNotSaved: the host applied
// a declaration in full (a tree went away, a file took a path beneath it)
// and was killed before state.json was saved; started again with the state
// before, the same declaration failed for good.
func TestApply_TheSameDeclarationAfterTheStateWasNotSaved(t *testing.T) {
	a := testAgent(t)
	tarb := makeTar(t, tarEntry{name: "bin/run", body: "#!/bin/sh\n", mode: 0o755})
	d := cacheBlob(t, a, tarb)
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}); err != nil {
		t.Fatal(err)
	}
	conf := "c\n"
	decl := []models.Resource{{ID: "app.conf", Module: "app", Build: 2, Kind: "file", Path: "/opt/app/conf", Content: &conf}}
	before := a.state.clone()
	if _, err := applyAs(t, a, 2, decl...); err != nil {
		t.Fatal(err)
	}
	a.state = before // killed before the state was saved
	if _, err := applyAs(t, a, 2, decl...); err != nil {
		t.Fatalf("the same declaration after a restart: %v", err)
	}
}

// TestApply_AJudgeCutShortLeavesNothingForGood: judgeTree unpacks a whole
// archive into StateDir/judge-*; a host killed meanwhile left it, and
// nothing removed it: up to an archive's unpacked size for good, a kill
// at a time. The next judge clears what an earlier one left.
func TestApply_AJudgeCutShortLeavesNothingForGood(t *testing.T) {
	a := testAgent(t)
	left := filepath.Join(a.cfg.StateDir, "judge-123456")
	if err := os.MkdirAll(filepath.Join(left, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "bin/run"), make([]byte, 1<<20), 0o755); err != nil {
		t.Fatal(err)
	}
	// A tree taking the path of mesh's file that goes away is judged.
	conf := "c\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf}); err != nil {
		t.Fatal(err)
	}
	d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	if _, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}); err != nil {
		t.Fatal(err)
	}
	if exists(left) {
		t.Fatalf("%s, left by a judge cut short, is still there after another", left)
	}
}
