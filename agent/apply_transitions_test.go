package agent

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// fakeSystemctl makes a.cfg.Systemctl a script recording its calls; it
// returns how many daemon-reloads it has seen.
func fakeSystemctl(t *testing.T, a *Agent) func() int {
	t.Helper()
	calls := filepath.Join(t.TempDir(), "calls")
	a.cfg.Systemctl = filepath.Join(t.TempDir(), "systemctl")
	if err := os.WriteFile(a.cfg.Systemctl, []byte("#!/bin/sh\necho \"$*\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return func() int { b, _ := os.ReadFile(calls); return strings.Count(string(b), "daemon-reload\n") }
}

func applyAs(t *testing.T, a *Agent, gen int64, rs ...models.Resource) ([]models.Action, error) {
	t.Helper()
	st := a.state.clone()
	acts, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: gen, Resources: rs}, st)
	a.state = st // as applyWithRetries does
	return acts, err
}

// TestApply_UnitWrittenByAFailedApplyIsReloadedOnRetry: an apply wrote a
// unit file, then failed on a later resource; its retry found the unit
// unchanged and systemd was never reloaded: the reload was owed only once
// the reload step was reached.
func TestApply_UnitWrittenByAFailedApplyIsReloadedOnRetry(t *testing.T) {
	a := testAgent(t)
	reloads := fakeSystemctl(t, a)
	unit, conf := "[Service]\nExecStart=/opt/web/run\n", "x\n"
	// A person's file where the next resource needs a directory.
	if err := os.MkdirAll(filepath.Join(a.root.dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.root.dir, "etc/web"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	decl := []models.Resource{
		{ID: "web.unit", Module: "web", Build: 1, Kind: "file", Path: "/etc/systemd/system/web.service", Content: &unit},
		{ID: "web.conf", Module: "web", Build: 1, Kind: "file", Path: "/etc/web/web.conf", Content: &conf},
	}
	if _, err := applyAs(t, a, 1, decl...); err == nil {
		t.Fatal("first attempt should fail on web.conf")
	}
	if !exists(filepath.Join(a.root.dir, "etc/systemd/system/web.service")) {
		t.Fatal("the unit was not written by the failed attempt")
	}
	// The person moves their file away; the retry succeeds.
	os.Remove(filepath.Join(a.root.dir, "etc/web"))
	acts, err := applyAs(t, a, 1, decl...)
	if err != nil {
		t.Fatal(err)
	}
	if reloads() == 0 {
		t.Fatalf("web.service was written and the apply finished, but systemd was never reloaded: %+v", acts)
	}
}

// TestApply_UnitMovedAwayReloads: a unit file moved (same id) to a path
// that is no unit's: the old unit file was removed and systemd, never
// reloaded, kept the unit (only the new path was looked at).
func TestApply_UnitMovedAwayReloads(t *testing.T) {
	a := testAgent(t)
	reloads := fakeSystemctl(t, a)
	unit := "[Service]\nExecStart=/opt/web/run\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "web.unit", Module: "web", Build: 1, Kind: "file", Path: "/etc/systemd/system/web.service", Content: &unit}); err != nil {
		t.Fatal(err)
	}
	before := reloads()
	acts, err := applyAs(t, a, 2, models.Resource{ID: "web.unit", Module: "web", Build: 2, Kind: "file", Path: "/etc/web/web.service.example", Content: &unit})
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(a.root.dir, "etc/systemd/system/web.service")) {
		t.Fatal("old unit still there")
	}
	if reloads() == before {
		t.Fatalf("web.service was removed from /etc/systemd/system but systemd was not reloaded: %+v", acts)
	}
}

// TestApply_FileTakingATreesPathRemovesItsVersions: a file took a tree's
// path (same id, or renamed): the tree's unpacked versions stayed on disk,
// named by no declaration and by no state.
func TestApply_FileTakingATreesPathRemovesItsVersions(t *testing.T) {
	for _, sameID := range []bool{true, false} {
		t.Run(map[bool]string{true: "SameID", false: "Renamed"}[sameID], func(t *testing.T) {
			a := testAgent(t)
			dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "big"}))
			if _, err := applyAs(t, a, 1, models.Resource{ID: "app.x", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: dg}}); err != nil {
				t.Fatal(err)
			}
			c := "now a file\n"
			id := "app.x"
			if !sameID {
				id = "app.y"
			}
			acts, err := applyAs(t, a, 2, models.Resource{ID: id, Module: "app", Build: 2, Kind: "file", Path: "/opt/app", Content: &c})
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/app")); err != nil || string(b) != c {
				t.Fatalf("/opt/app: %q %v", b, err)
			}
			if exists(filepath.Join(a.root.dir, "opt/.app.mesh")) {
				t.Fatalf("the old tree's unpacked versions /opt/.app.mesh are left on disk, named by nothing: actions %+v", acts)
			}
		})
	}
}

// TestApply_TreeMovedBeneathItsOldPath: a tree moved beneath its old path
// (/opt/app → /opt/app/current) was unpacked through the old tree's link
// into its version, which was then removed with it: reported updated,
// nothing on disk.
func TestApply_TreeMovedBeneathItsOldPath(t *testing.T) {
	a := testAgent(t)
	dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "1"}))
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: dg}}); err != nil {
		t.Fatal(err)
	}
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app/current", Artifact: &models.Artifact{Digest: dg}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/app/current/bin/run")); err != nil || string(b) != "1" {
		t.Fatalf("/opt/app/current/bin/run: %q %v; state %+v; actions %+v", b, err, a.state.Resources["app.tree"], acts)
	}
}

// TestApply_FileDeclaredInsideATreeThatGoes: a tree no longer named, and a
// file declared inside its path: the file was written through the tree's
// link into its version, then removed with it; reported created.
func TestApply_FileDeclaredInsideATreeThatGoes(t *testing.T) {
	a := testAgent(t)
	dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "1"}))
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: dg}}); err != nil {
		t.Fatal(err)
	}
	c := "port=80\n"
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.conf", Module: "app", Build: 2, Kind: "file", Path: "/opt/app/app.conf", Content: &c})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/app/app.conf")); err != nil || string(b) != c {
		t.Fatalf("/opt/app/app.conf: %q %v; state %+v; actions %+v", b, err, a.state.Resources["app.conf"], acts)
	}
}

// TestApply_FileMovedBeneathItsOldPath: a file moved from /etc/app to
// /etc/app/app.conf (same id) could never be written: its old self was in
// the way, and removed only after the new one was written.
func TestApply_FileMovedBeneathItsOldPath(t *testing.T) {
	a := testAgent(t)
	c := "x\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app", Content: &c}); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		acts, err := applyAs(t, a, 2, models.Resource{ID: "app.conf", Module: "app", Build: 2, Kind: "file", Path: "/etc/app/app.conf", Content: &c})
		if err != nil {
			t.Fatalf("attempt %d: %v (actions %+v)", attempt, err, acts)
		}
	}
}

// TestApply_FileMovedToItsParentDirectory: the reverse, /etc/app/app.conf
// to /etc/app: the directory its old self left was in the way.
func TestApply_FileMovedToItsParentDirectory(t *testing.T) {
	a := testAgent(t)
	c := "x\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app/app.conf", Content: &c}); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		acts, err := applyAs(t, a, 2, models.Resource{ID: "app.conf", Module: "app", Build: 2, Kind: "file", Path: "/etc/app", Content: &c})
		if err != nil {
			t.Fatalf("attempt %d: %v (actions %+v)", attempt, err, acts)
		}
	}
}

// stopWitness wraps the supervisor: when it is asked to replace a running
// service, it notes whether the command the old process runs is still on
// disk.
type stopWitness struct {
	*supervisor
	rootDir string
	seen    []string
}

func (w *stopWitness) Ensure(ctx context.Context, r models.Resource, digest string) (string, error) {
	w.supervisor.mu.Lock()
	sv := w.supervisor.svcs[r.ID]
	w.supervisor.mu.Unlock()
	if sv != nil && sv.digest != digest {
		old := sv.res.Command[0]
		if !exists(filepath.Join(w.rootDir, old)) {
			w.seen = append(w.seen, r.ID+" still ran while "+old+" was removed")
		}
	}
	return w.supervisor.Ensure(ctx, r, digest)
}

// TestApply_AMovedTreeOutlivesTheServiceOnIt: a service's tree moved
// (/opt/app → /opt/app2) and its command with it: the old tree was removed
// as soon as the new one was in place, while the old service still ran on
// it; the service was restarted only afterwards.
func TestApply_AMovedTreeOutlivesTheServiceOnIt(t *testing.T) {
	a := testAgent(t)
	sup := a.services.(*supervisor)
	w := &stopWitness{supervisor: sup, rootDir: a.root.dir}
	a.services = w
	t.Cleanup(func() { _ = sup.Stop(context.Background(), "app.svc") })
	dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "#!/bin/sh\nexec sleep 1000\n", mode: 0o755}))
	decl := func(gen int64, dir string) []models.Resource {
		return []models.Resource{
			{ID: "app.tree", Module: "app", Build: gen, Kind: "tree", Path: dir, Artifact: &models.Artifact{Digest: dg}},
			{ID: "app.svc", Module: "app", Build: gen, Kind: "service", Command: []string{dir + "/bin/run"}, After: []string{"app.tree"}},
		}
	}
	if _, err := applyAs(t, a, 1, decl(1, "/opt/app")...); err != nil {
		t.Fatal(err)
	}
	acts, err := applyAs(t, a, 2, decl(2, "/opt/app2")...)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.seen) > 0 {
		t.Fatalf("files removed before the service using them was stopped: %v (actions %+v)", w.seen, acts)
	}
}

// TestApply_AFileBeneathNestedTreesThatGo: a tree at /opt/app/plugins,
// unpacked through the link of a tree at /opt/app, and both go while a
// file is declared at /opt/app/plugins/x.conf. With the inner tree's id
// first, only it was cleared and the file was written through the outer
// link into the version removed with it (reported created); with the
// outer first, the inner one's turn found a real directory and every
// attempt failed "directory not empty".
func TestApply_AFileBeneathNestedTreesThatGo(t *testing.T) {
	for _, ids := range [][2]string{{"b.app", "a.plugins"}, {"a.app", "b.plugins"}} {
		t.Run(ids[0]+","+ids[1], func(t *testing.T) {
			a := testAgent(t)
			outer := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "1"}))
			inner := cacheBlob(t, a, makeTar(t, tarEntry{name: "p.so", body: "2"}))
			if _, err := applyAs(t, a, 1,
				models.Resource{ID: ids[0], Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: outer}},
				models.Resource{ID: ids[1], Module: "app", Build: 1, Kind: "tree", Path: "/opt/app/plugins", Artifact: &models.Artifact{Digest: inner}, After: []string{ids[0]}},
			); err != nil {
				t.Fatal(err)
			}
			c := "port=80\n"
			for attempt := 1; attempt <= 2; attempt++ {
				acts, err := applyAs(t, a, 2, models.Resource{ID: "c.conf", Module: "app", Build: 2, Kind: "file", Path: "/opt/app/plugins/x.conf", Content: &c})
				if err != nil {
					t.Fatalf("attempt %d: %v (actions %+v)", attempt, err, acts)
				}
				if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/app/plugins/x.conf")); err != nil || string(b) != c {
					t.Fatalf("attempt %d: /opt/app/plugins/x.conf, reported %+v: %q %v", attempt, acts, b, err)
				}
			}
			if exists(filepath.Join(a.root.dir, "opt/.app.mesh")) {
				t.Fatal("the outer tree's versions are left behind")
			}
		})
	}
}

// TestApply_ARefusedArchiveBeneathWhatGoesChangesNothing: a tree whose
// path lies beneath a file that goes away cannot be staged before the
// apply changes anything; skipped in step 0, its escaping archive was
// refused only after the declaration's other files were written.
func TestApply_ARefusedArchiveBeneathWhatGoesChangesNothing(t *testing.T) {
	a := testAgent(t)
	c1, c2 := "1\n", "2\n"
	if _, err := applyAs(t, a, 1,
		models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &c1},
		models.Resource{ID: "app.old", Module: "app", Build: 1, Kind: "file", Path: "/opt/app", Content: &c1},
	); err != nil {
		t.Fatal(err)
	}
	bad := cacheBlob(t, a, makeTar(t, tarEntry{name: "l", link: "/etc", typ: tar.TypeSymlink}))
	acts, err := applyAs(t, a, 2,
		models.Resource{ID: "app.conf", Module: "app", Build: 2, Kind: "file", Path: "/etc/app.conf", Content: &c2},
		models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app/current", Artifact: &models.Artifact{Digest: bad}, After: []string{"app.conf"}},
	)
	var rf *refusal
	if !errors.As(err, &rf) || !strings.Contains(rf.reason, "escape") {
		t.Fatalf("an escaping archive: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(a.root.dir, "etc/app.conf"))
	if string(b) != c1 || !exists(filepath.Join(a.root.dir, "opt/app")) || len(acts) > 0 {
		t.Fatalf("the refused declaration changed the machine: /etc/app.conf %q, /opt/app there %v; actions %+v", b, exists(filepath.Join(a.root.dir, "opt/app")), acts)
	}
}

// TestApply_NothingDeclaredInATreesVersions: a file declared in
// /opt/.app.mesh, where the host keeps /opt/app's unpacked versions, was
// written, reported created, and removed with the tree. Such a path is
// refused, here and at upload.
func TestApply_NothingDeclaredInATreesVersions(t *testing.T) {
	c := "x\n"
	d := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "app.conf", Module: "app", Build: 2, Kind: "file", Path: "/opt/.app.mesh/x", Content: &c}}}
	if err := checkResources(d, []string{"/"}); err == nil || !strings.Contains(err.Error(), "unpacked versions") {
		t.Fatalf("a file in a tree's versions: %v", err)
	}
	if _, err := models.ParseManifest([]byte(`{"resources": [{"name": "x", "kind": "file", "path": "/opt/.app.mesh/x", "content": "x"}]}`)); err == nil ||
		!strings.Contains(err.Error(), "unpacked versions") {
		t.Fatalf("a manifest naming a tree's versions: %v", err)
	}
}

// TestApply_TreeTakingADirectoryOfMeshsFiles: a tree declared at /opt/app,
// which held only mesh's own file that goes away: its staging in step 0
// found a real directory and refused it on every attempt.
func TestApply_TreeTakingADirectoryOfMeshsFiles(t *testing.T) {
	a := testAgent(t)
	c := "x\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/app.conf", Content: &c}); err != nil {
		t.Fatal(err)
	}
	dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "1"}))
	for attempt := 1; attempt <= 2; attempt++ {
		acts, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: dg}})
		if err != nil {
			t.Fatalf("attempt %d: %v (actions %+v)", attempt, err, acts)
		}
		if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/app/bin/run")); err != nil || string(b) != "1" {
			t.Fatalf("attempt %d: /opt/app/bin/run %q %v", attempt, b, err)
		}
	}
}

// TestApply_WhatLiesInAChangingTreeComesAfterIt: a tree or file beneath a
// tree's path, applied before that tree flipped to its new version (its
// order, or an `after` the other way), was written through the old link
// into the version the flip removed: reported unchanged or updated,
// nothing on disk. It comes after the tree now; an `after` that says
// otherwise is refused as the cycle it is.
func TestApply_WhatLiesInAChangingTreeComesAfterIt(t *testing.T) {
	for _, innerChanges := range []bool{false, true} {
		t.Run(map[bool]string{false: "InnerSame", true: "InnerChanges"}[innerChanges], func(t *testing.T) {
			a := testAgent(t)
			o1 := cacheBlob(t, a, makeTar(t, tarEntry{name: "run", body: "outer1"}))
			o2 := cacheBlob(t, a, makeTar(t, tarEntry{name: "run", body: "outer2"}))
			i1 := cacheBlob(t, a, makeTar(t, tarEntry{name: "lib.so", body: "inner1"}))
			i2 := cacheBlob(t, a, makeTar(t, tarEntry{name: "lib.so", body: "inner2"}))
			c1, c2 := "conf\n", "conf2\n"
			if _, err := applyAs(t, a, 1,
				models.Resource{ID: "app.outer", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: o1}},
				models.Resource{ID: "app.inner", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app/lib", Artifact: &models.Artifact{Digest: i1}},
				models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/app.conf", Content: &c1},
			); err != nil {
				t.Fatal(err)
			}
			i, want := i1, "inner1"
			if innerChanges {
				i, want = i2, "inner2"
			}
			// Ids sort inner and conf before outer, and nothing names an order.
			acts, err := applyAs(t, a, 2,
				models.Resource{ID: "app.conf", Module: "app", Build: 2, Kind: "file", Path: "/opt/app/app.conf", Content: &c2},
				models.Resource{ID: "app.inner", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app/lib", Artifact: &models.Artifact{Digest: i}},
				models.Resource{ID: "app.outer", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: o2}},
			)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/app/lib/lib.so")); err != nil || string(b) != want {
				t.Fatalf("/opt/app/lib/lib.so: %q %v; actions %+v", b, err, acts)
			}
			if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/app/app.conf")); err != nil || string(b) != c2 {
				t.Fatalf("/opt/app/app.conf: %q %v; actions %+v", b, err, acts)
			}
		})
	}
	d := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "app.outer", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: "sha256:" + strings.Repeat("a", 64)}, After: []string{"app.inner"}},
		{ID: "app.inner", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app/lib", Artifact: &models.Artifact{Digest: "sha256:" + strings.Repeat("b", 64)}},
	}}
	if err := checkResources(d, []string{"/"}); err == nil || !strings.Contains(err.Error(), "what lies beneath a tree's path comes after the tree") {
		t.Fatalf("an outer tree after its inner one: %v", err)
	}
	if _, err := models.ParseManifest([]byte(`{"resources": [
	  {"name": "outer", "kind": "tree", "path": "/opt/app", "after": ["inner"]},
	  {"name": "inner", "kind": "tree", "path": "/opt/app/lib"}]}`)); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("a manifest with an outer tree after its inner one: %v", err)
	}
}

// TestApply_APersonsSymlinkIsNoEmptyDirectory: mesh's file written through
// a person's symlink (/opt/app/conf → /srv/appconf) went away beneath a
// tree's path; clearing the directories it left empty removed the
// person's symlink as one, whatever its target held.
func TestApply_APersonsSymlinkIsNoEmptyDirectory(t *testing.T) {
	a := testAgent(t)
	root := a.root.dir
	if err := os.MkdirAll(filepath.Join(root, "srv/appconf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "srv/appconf/theirs.conf"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "opt/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../srv/appconf", filepath.Join(root, "opt/app/conf")); err != nil {
		t.Fatal(err)
	}
	c := "x\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf/app.conf", Content: &c}); err != nil {
		t.Fatal(err)
	}
	dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "run", body: "1"}))
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: dg}})
	if fi, lerr := os.Lstat(filepath.Join(root, "opt/app/conf")); lerr != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the person's symlink /opt/app/conf was removed (apply: %v; actions %+v)", err, acts)
	}
	if err == nil || !strings.Contains(err.Error(), "holding what mesh does not manage") {
		t.Fatalf("a tree over a directory holding a person's link: %v", err)
	}
}

// TestApply_ATreeJudgedAsideChecksItsPathFirst: a tree whose path held
// mesh's file that goes away and a person's file was judged aside in step
// 0 without asking whether its path would be free: it failed in step 2,
// after earlier resources were written and mesh's file removed.
func TestApply_ATreeJudgedAsideChecksItsPathFirst(t *testing.T) {
	a := testAgent(t)
	root := a.root.dir
	c := "old\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/old.conf", Content: &c}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "opt/app/theirs.txt"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "run", body: "1"}))
	n := "new\n"
	acts, err := applyAs(t, a, 2,
		models.Resource{ID: "etc.new", Module: "etc", Build: 2, Kind: "file", Path: "/etc/new.conf", Content: &n},
		models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: dg}, After: []string{"etc.new"}},
	)
	if err == nil || !strings.Contains(err.Error(), "/opt/app/theirs.txt") {
		t.Fatalf("a tree over a person's directory: %v (actions %+v)", err, acts)
	}
	if exists(filepath.Join(root, "etc/new.conf")) || !exists(filepath.Join(root, "opt/app/old.conf")) || len(acts) > 0 {
		t.Fatalf("the failed declaration changed the machine: actions %+v", acts)
	}
}

// TestApply_APersonsEmptyDirectoryIsTheirs: a tree takes a directory
// holding mesh's file that goes away and a person's empty directory: it
// was judged free, and step 2 removed mesh's file before failing on the
// directory (refused after a change, not naming it).
func TestApply_APersonsEmptyDirectoryIsTheirs(t *testing.T) {
	a := testAgent(t)
	conf := "c\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(a.root.dir, "opt/app/theirs"), 0o755); err != nil {
		t.Fatal(err)
	}
	tarb := makeTar(t, tarEntry{name: "bin/run", body: "#!/bin/sh\n", mode: 0o755})
	d := cacheBlob(t, a, tarb)
	_, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}})
	if err == nil || !strings.Contains(err.Error(), "/opt/app/theirs/") {
		t.Fatalf("a tree over a directory holding a person's empty one: %v", err)
	}
	if !exists(filepath.Join(a.root.dir, "opt/app/conf")) {
		t.Fatalf("refused (%v) after removing /opt/app/conf: a refusal changes nothing", err)
	}
}

// TestApply_APersonsDirectoryAtMeshsFilesPathRefusesTheTreeFirst: mesh's
// file /opt/app/conf goes away and a tree takes /opt/app; a person has
// made /opt/app/conf a directory holding their file. The tree was refused
// only in step 2 (a directory at the path of what goes away was skipped
// unlooked), after the file before it was written.
func TestApply_APersonsDirectoryAtMeshsFilesPathRefusesTheTreeFirst(t *testing.T) {
	a := testAgent(t)
	conf := "c\n"
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(a.root.dir, "opt/app/conf")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "theirs"), []byte("theirs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	other := "o\n"
	acts, err := applyAs(t, a, 2,
		models.Resource{ID: "app.other", Module: "app", Build: 2, Kind: "file", Path: "/etc/app/other", Content: &other},
		models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}})
	if err == nil {
		t.Fatalf("a tree over /opt/app, where a person's file lies in /opt/app/conf/: taken (actions %+v)", acts)
	}
	if exists(filepath.Join(a.root.dir, "etc/app/other")) {
		t.Fatalf("refused (%v) after writing /etc/app/other: a refusal changes nothing (actions %+v)", err, acts)
	}
	if !strings.Contains(err.Error(), "/opt/app/conf/") {
		t.Fatalf("refused without naming the person's file: %v", err)
	}
}

// TestApply_ATreeOverADirectoryOfMeshsFileThatStays: a directory holding
// only mesh's file is taken by a tree when the file goes away; when the
// same file stayed declared, beneath the new tree (written into it after
// the flip), the tree was refused for good as "not a tree mesh manages".
func TestApply_ATreeOverADirectoryOfMeshsFileThatStays(t *testing.T) {
	a := testAgent(t)
	conf := "c\n"
	f := models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf}
	if _, err := applyAs(t, a, 1, f); err != nil {
		t.Fatal(err)
	}
	d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	f.Build = 2
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}, f)
	if err != nil {
		t.Fatalf("a tree at /opt/app, holding only mesh's file declared again inside it: %v (actions %+v)", err, acts)
	}
}
