package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"mesh/client"
	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_UploadThroughASymlinkedDirPacksItsFiles: an operator uploads
// ./current, a symlink to the release directory (current -> releases/1.0.0,
// as deploy layouts and nix's ./result are). packTree walks it with
// filepath.WalkDir, which does not follow a root that is a symlink: the
// artifact was an empty tar.gz, accepted, exit 0 — a build whose tree
// resource empties /opt/app on every machine. It packs the files the
// directory the link names holds.
func TestMeshctl_UploadThroughASymlinkedDirPacksItsFiles(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	meshctl := asAdmin(t, e)
	root := t.TempDir()
	real := filepath.Join(root, "releases", "1.0.0")
	if err := os.MkdirAll(filepath.Join(real, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "bin", "run"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(root, "current")
	if err := os.Symlink(filepath.Join("releases", "1.0.0"), current); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(root, "manifest.json")
	if err := os.WriteFile(manifest, []byte(appManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := meshctl("modules", "create", "app"); code != 0 {
		t.Fatalf("modules create: exit %d: %s", code, errOut)
	}
	out, errOut, code := meshctl("builds", "upload", "app", current, "--manifest", manifest, "--version", "1.0.0", "-o", "json")
	if code != 0 {
		t.Fatalf("upload through a link: exit %d: %s", code, errOut)
	}
	var b client.Build
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("upload: %v\n%s\n%s", err, out, errOut)
	}
	resp, blob := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/blobs/" + b.Digest, Token: e.Admin})
	if resp.StatusCode != 200 {
		t.Fatalf("the artifact: %d", resp.StatusCode)
	}
	got := untar(t, blob)
	if got["bin/run"] != "#!/bin/sh\necho hi\n" {
		t.Fatalf("uploading %s (a symlink to a directory) exited 0 with an artifact of %d bytes holding %v: the directory's files were left out", current, b.Size, got)
	}
}
