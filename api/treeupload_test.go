package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// tarGz is an archive of the given entries (a name ending in / is a
// directory, one with "->" a symlink, one with "=>" a hardlink).
func tarGz(t *testing.T, names ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range names {
		h := &tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg, Size: 2}
		switch {
		case strings.HasSuffix(n, "/"):
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o755
		case strings.Contains(n, "=>"):
			name, link, _ := strings.Cut(n, "=>")
			h.Name, h.Linkname, h.Typeflag, h.Size = name, link, tar.TypeLink, 0
		case strings.Contains(n, "->"):
			name, link, _ := strings.Cut(n, "->")
			h.Name, h.Linkname, h.Typeflag, h.Size = name, link, tar.TypeSymlink, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("x\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	_ = gz.Close()
	return buf.Bytes()
}

// TestBuilds_ATreeNoHostUnpacksIsRefusedAtUpload: a build whose tree
// unpacks its artifact, and whose artifact every host would refuse to
// unpack (an entry that leaves the tree, a symlink out of it, not a
// tar.gz), is refused when uploaded, saying why; it was stored, and found
// only when its plan's canary refused it. An artifact no tree unpacks is
// the build's own business, and a tree that stays inside is taken.
func TestBuilds_ATreeNoHostUnpacksIsRefusedAtUpload(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "app"}}, 201, nil)
		tree := `{"resources": [{"name": "runtime", "kind": "tree", "path": "/opt/app"}]}`
		for _, c := range []struct {
			artifact []byte
			why      string
		}{
			{tarGz(t, "bin/", "bin/run", "../../etc/cron.d/x"), "entry ../../etc/cron.d/x contains .."},
			{tarGz(t, "bin/", "/etc/passwd"), "entry /etc/passwd has an absolute path"},
			{tarGz(t, "bin/", "bin/up->../../.."), "symlink bin/up → ../../.. leaves the tree"},
			{[]byte("#!/bin/sh\necho a script, not an archive\n"), "not a tar.gz"},
			// A name no host can make is refused before it is looked at:
			// a thousand names of a megabyte were seconds of CPU each.
			{tarGz(t, strings.Repeat("a/", 50_000)+"f"), "is a name of 100001 bytes, over the 4096 a host can make"},
			{tarGz(t, "bin/"+strings.Repeat("x", 300)), "has a name of 300 bytes in it, over the 255 a host can make"},
			// The shape the entries make, which no entry alone tells.
			{tarGz(t, "bin/", "bin/run", "bin/run"), "entry bin/run is given twice"},
			{tarGz(t, "bin", "bin/run"), "entry bin/run lies beneath bin, a file"},
			{tarGz(t, "bin/", "bin/hard=>bin/nothing"), "hardlink bin/hard → bin/nothing names no file given before it"},
			{tarGz(t, "bin/", "bin/hard=>bin"), "hardlink bin/hard → bin names a directory"},
		} {
			resp, body := e.Upload(e.Admin, "app", tree, c.artifact, "")
			if resp.StatusCode != 400 || !strings.Contains(string(body), "tree runtime unpacks the build's artifact, and every host would refuse it: ") ||
				!strings.Contains(string(body), c.why) {
				t.Errorf("%s: %d %s", c.why, resp.StatusCode, body)
			}
		}
		var builds struct{ Items []struct{ Number int64 } }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules/app/builds", Token: e.Admin}, 200, &builds)
		if len(builds.Items) != 0 {
			t.Fatalf("refused uploads made builds: %+v", builds.Items)
		}
		if resp, body := e.Upload(e.Admin, "app", tree, tarGz(t, "./", "bin/", "bin/", "bin/run", "bin/same=>bin/run", "lib->bin", "lib/beneath-a-link", "lib/x=>bin/run",
			"hard=>lib", "hard/beneath-a-hardlinked-symlink"), ""); resp.StatusCode != 201 {
			t.Fatalf("a tree that stays inside: %d %s", resp.StatusCode, body)
		}
		// What the judge reads is bounded (1 GiB of content): past it the
		// hosts judge, so an entry announcing 2 GiB ends its reading, and
		// what follows is not looked at.
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		_ = tw.WriteHeader(&tar.Header{Name: "big", Mode: 0o644, Typeflag: tar.TypeReg, Size: 2 << 30})
		_, _ = tw.Write(make([]byte, 4096))
		_ = gz.Close()
		if resp, body := e.Upload(e.Admin, "app", tree, buf.Bytes(), ""); resp.StatusCode != 201 {
			t.Fatalf("an archive past what is judged: %d %s", resp.StatusCode, body)
		}
		file := `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "x"}]}`
		if resp, body := e.Upload(e.Admin, "app", file, []byte("not an archive, and no tree unpacks it"), ""); resp.StatusCode != 201 {
			t.Fatalf("an artifact no tree unpacks: %d %s", resp.StatusCode, body)
		}
	})
}
