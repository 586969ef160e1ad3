package agent

import (
	"mesh/models"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// actionOf is the action an apply reported for resource id; it fails the
// test when there is none.
func actionOf(t *testing.T, acts []models.Action, id string) models.Action {
	t.Helper()
	for _, act := range acts {
		if act.Resource == id {
			return act
		}
	}
	t.Fatalf("no action for %s in %+v", id, acts)
	return models.Action{}
}

// TestApply_AForgottenFileInATreeThatGoesIsSaidToGo: a file with on_remove
// forget, written in a tree's path, lives in the tree's version: when the
// tree went, so did the file, reported "forgotten … left in place".
// Whatever the ids' order: with the tree's id sorted before the file's
// (app.a), step 3 (last first) judged the file by what was on disk before
// the tree was removed.
func TestApply_AForgottenFileInATreeThatGoesIsSaidToGo(t *testing.T) {
	for _, tree := range []string{"app.tree", "app.a"} {
		t.Run(tree, func(t *testing.T) {
			a := testAgent(t)
			dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "run", body: "1"}))
			c := "keep me\n"
			if _, err := applyAs(t, a, 1,
				models.Resource{ID: tree, Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: dg}},
				models.Resource{ID: "app.data", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/data.db", Content: &c, OnRemove: "forget"},
			); err != nil {
				t.Fatal(err)
			}
			acts, err := applyAs(t, a, 2)
			if err != nil {
				t.Fatal(err)
			}
			if exists(filepath.Join(a.root.dir, "opt/app/data.db")) {
				t.Fatal("the test's premise: the file went with the tree")
			}
			if act := actionOf(t, acts, "app.data"); act.Action != "removed" || !strings.Contains(act.Detail, "lay in the tree at /opt/app") {
				t.Fatalf("app.data, gone with its tree, is reported %s %q", act.Action, act.Detail)
			}
		})
	}
}

// TestApply_AForgottenFileInATreeThatChangedIsSaidToGo: a file declared
// on_remove forget inside a tree; the next declaration dropped it and
// changed the tree: the flip took the file with the old version, reported
// left in place.
func TestApply_AForgottenFileInATreeThatChangedIsSaidToGo(t *testing.T) {
	a := testAgent(t)
	d1 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	d2 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v2\n", mode: 0o755}))
	conf := "c\n"
	tree := func(d string) models.Resource {
		return models.Resource{ID: "app.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app",
			Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}
	}
	if _, err := applyAs(t, a, 1, tree(d1),
		models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf, OnRemove: "forget"}); err != nil {
		t.Fatal(err)
	}
	acts, err := applyAs(t, a, 2, tree(d2))
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(a.root.dir, "opt/app/conf")) {
		t.Fatal("the test's premise: the file went with the tree's old version")
	}
	if act := actionOf(t, acts, "app.conf"); act.Action != "removed" || strings.Contains(act.Detail, "left in place") {
		t.Fatalf("app.conf went with the tree's old version, but the report says %q: %q", act.Action, act.Detail)
	}
}

// TestApply_AForgottenFileInATreeAFileTookIsSaidToGo: a file declared
// on_remove forget lay inside a tree; the next declaration drops it and
// puts a file at the tree's path (same id, or another). The tree's link
// and versions went, the forgotten file with them, yet the report says
// it was left in place.
func TestApply_AForgottenFileInATreeAFileTookIsSaidToGo(t *testing.T) {
	for _, id := range []string{"app.tree", "app.other"} {
		t.Run(id, func(t *testing.T) {
			a := testAgent(t)
			d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
			conf, c := "c\n", "now a file\n"
			if _, err := applyAs(t, a, 1,
				models.Resource{ID: "app.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}},
				models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf, OnRemove: "forget"}); err != nil {
				t.Fatal(err)
			}
			acts, err := applyAs(t, a, 2, models.Resource{ID: id, Module: "app", Build: 2, Kind: "file", Path: "/opt/app", Content: &c})
			if err != nil {
				t.Fatal(err)
			}
			if exists(filepath.Join(a.root.dir, "opt/app/conf")) {
				t.Fatal("setup: /opt/app/conf still there")
			}
			if act := actionOf(t, acts, "app.conf"); act.Action != "removed" || strings.Contains(act.Detail, "left in place") {
				t.Fatalf("app.conf went with the tree at /opt/app (a file is there now), but the report says %q: %q", act.Action, act.Detail)
			}
		})
	}
}

// TestApply_AForgottenTreeReplacedAtItsPathIsNotLeftInPlace: a tree
// declared on_remove forget is dropped and another tree takes its path:
// the flip replaced its link and removed its unpacked version, reported
// left in place at /opt/app.
func TestApply_AForgottenTreeReplacedAtItsPathIsNotLeftInPlace(t *testing.T) {
	a := testAgent(t)
	d1 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	d2 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v2\n", mode: 0o755}))
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.old", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", OnRemove: "forget",
		Artifact: &models.Artifact{Digest: d1, URL: models.BlobURL(d1)}}); err != nil {
		t.Fatal(err)
	}
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.new", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d2, URL: models.BlobURL(d2)}})
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(a.root.dir, "opt/.app.mesh", d1[7:])) {
		t.Fatal("setup: the old version is still there")
	}
	if act := actionOf(t, acts, "app.old"); strings.Contains(act.Detail, "left in place") {
		t.Fatalf("app.old's version was removed by app.new's flip at /opt/app, but the report says %q: %q", act.Action, act.Detail)
	}
}

// TestApply_AForgottenTreeAFileTookLeavesNoVersions: a tree declared
// on_remove forget is dropped and a file takes its path: the file
// replaced the tree's link, and its unpacked versions stay on disk for
// good, reachable by no link and named by no state, while the report
// says the tree was left in place.
func TestApply_AForgottenTreeAFileTookLeavesNoVersions(t *testing.T) {
	a := testAgent(t)
	d1 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.old", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", OnRemove: "forget",
		Artifact: &models.Artifact{Digest: d1, URL: models.BlobURL(d1)}}); err != nil {
		t.Fatal(err)
	}
	c := "now a file\n"
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.file", Module: "app", Build: 2, Kind: "file", Path: "/opt/app", Content: &c})
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(a.root.dir, "opt/.app.mesh")) {
		t.Fatalf("/opt/.app.mesh is left, reachable from no link (a file is at /opt/app): actions %+v", acts)
	}
}

// TestApply_AForgottenFileReplacedByTheTreesNewVersion: a forgotten file
// inside a tree that changes, whose new archive holds a file at the same
// place: the flip removed the forgotten content with the old version, and
// what was on disk there was the archive's file, said "left in place".
func TestApply_AForgottenFileReplacedByTheTreesNewVersion(t *testing.T) {
	a := testAgent(t)
	d1 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	d2 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v2\n", mode: 0o755}, tarEntry{name: "conf", body: "the archive's\n"}))
	conf := "the person's data, kept on purpose\n"
	tree := func(d string) models.Resource {
		return models.Resource{ID: "app.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app",
			Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}
	}
	if _, err := applyAs(t, a, 1, tree(d1),
		models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf, OnRemove: "forget"}); err != nil {
		t.Fatal(err)
	}
	acts, err := applyAs(t, a, 2, tree(d2))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(a.root.dir, "opt/app/conf"))
	if string(b) == conf {
		t.Fatal("the test's premise: the forgotten content went with the old version")
	}
	if act := actionOf(t, acts, "app.conf"); act.Action != "removed" || strings.Contains(act.Detail, "left in place") {
		t.Fatalf("app.conf's content went with the tree's old version (/opt/app/conf now holds %q, the archive's), but the report says %q: %q", b, act.Action, act.Detail)
	}
}
