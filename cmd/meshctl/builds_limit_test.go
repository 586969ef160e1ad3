package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_BuildsLsLimitZeroIsNotOneBuild: 'plans ls --limit 0' means
// all, and 'sends', 'audit' and 'machines reports' refuse a --limit under
// 1; 'builds ls --limit 0' sent limit=0, which the API clamps to 1, and
// printed the newest build alone with exit 0 — a script asking for every
// build of a module (to find the one to pin) was told there is one. It
// lists them all, through their pages, as 'plans ls --limit 0' does.
func TestMeshctl_BuildsLsLimitZeroIsNotOneBuild(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	meshctl := asAdmin(t, e)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(manifest, []byte(appManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := meshctl("modules", "create", "app"); code != 0 {
		t.Fatalf("modules create: exit %d: %s", code, errOut)
	}
	for _, v := range []string{"1.0.0", "1.0.1", "1.0.2"} {
		src := filepath.Join(dir, v)
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "VERSION"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := meshctl("builds", "upload", "app", src, "--manifest", manifest, "--version", v); code != 0 {
			t.Fatalf("upload %s: exit %d: %s", v, code, errOut)
		}
	}
	out, errOut, code := meshctl("builds", "ls", "app", "--limit", "0")
	if code != 0 {
		t.Fatalf("builds ls app --limit 0: exit %d: %s", code, errOut)
	}
	for _, v := range []string{"1.0.0", "1.0.1", "1.0.2"} {
		if !strings.Contains(out, v) {
			t.Fatalf("builds ls app --limit 0 exited 0 without build %s of three:\nstdout:\n%s\nstderr:\n%s", v, out, errOut)
		}
	}
}
