package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// TestApply_AForgottenFileInATreeThatGoesIsSaidToGoWhateverItsID: the
// tree's id sorted before the forgotten file's, so step 3 (last first)
// judged the file by what was on disk before the tree was removed: said
// "left in place", then the tree's removal took it.
func TestApply_AForgottenFileInATreeThatGoesIsSaidToGoWhateverItsID(t *testing.T) {
	a := testAgent(t)
	dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "run", body: "1"}))
	c := "keep me\n"
	if _, err := applyAs(t, a, 1,
		models.Resource{ID: "app.a", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: dg}},
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
	for _, act := range acts {
		if act.Resource == "app.data" && (act.Action != "removed" || strings.Contains(act.Detail, "left in place")) {
			t.Fatalf("app.data, gone with its tree, is reported %s %q", act.Action, act.Detail)
		}
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
	for _, act := range acts {
		if act.Resource == "app.conf" && (act.Action != "removed" || strings.Contains(act.Detail, "left in place")) {
			t.Fatalf("app.conf's content went with the tree's old version (/opt/app/conf now holds %q, the archive's), but the report says %q: %q", b, act.Action, act.Detail)
		}
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

// TestApply_ACertificateKeptInADirectoryATreeTakes: a certificate declared
// again at the same paths inside a real directory a tree takes: its files
// are cleared for the tree, and it is issued again, not left missing.
func TestApply_ACertificateKeptInADirectoryATreeTakes(t *testing.T) {
	a := testAgent(t)
	certSigningController(t, a)
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/opt/app/chain.pem", KeyPath: "/opt/app/key.pem", Mode: "0600", Lifetime: "1h"}
	if _, err := applyAs(t, a, 1, cert); err != nil {
		t.Fatal(err)
	}
	d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}, cert)
	if err != nil {
		t.Fatalf("%v (actions %+v)", err, acts)
	}
	if _, err := a.certificateOnDisk(cert); err != nil {
		t.Fatalf("the certificate, declared again and said %+v, is not on disk: %v", acts, err)
	}
	if !exists(filepath.Join(a.root.dir, "opt/app/bin/run")) {
		t.Fatal("tree not in place")
	}
}
