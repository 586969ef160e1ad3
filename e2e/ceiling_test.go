package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/store"
)

// gzipBomb is a tar.gz of about 1 MiB whose one file unpacks to 1 GiB of
// zeros: gzip members (read as one stream) of the tar header, then one
// compressed MiB of zeros again and again.
func gzipBomb(t *testing.T) []byte {
	t.Helper()
	member := func(b []byte) []byte {
		var buf bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = gz.Write(b)
		_ = gz.Close()
		return buf.Bytes()
	}
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	out := member(hdr.Bytes())
	zeros := member(make([]byte, 1<<20))
	for range 1<<10 + 1 {
		out = append(out, zeros...)
	}
	return out
}

// TestRefusals_ArchiveBombRefusedAsTooLarge: a module whose 1 MiB artifact
// unpacks to 1 GiB is refused under the host's default ceilings: reported
// and journaled as a refusal (never retried), the generation finished, the
// tree not installed and the running service undisturbed.
func TestRefusals_ArchiveBombRefusedAsTooLarge(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	h, _, port := deployed(t, c, "m1")
	c.module("bomb")
	c.upload("bomb", `{"resources": [{"name": "tree", "kind": "tree", "path": "/opt/bomb"}]}`, gzipBomb(t))
	gen := c.assign("m1", "node-tools", "bomb")
	r := c.waitReport("m1", "refused", "too large")
	if r.Generation != gen || r.Send == "" {
		t.Fatalf("the refusal names generation %d, send %q; want %d and its send", r.Generation, r.Send, gen)
	}
	waitFor(t, 10*time.Second, "the refused generation finished", func() bool { return c.machine("m1").FinishedGen == gen })
	for _, rep := range c.reports("m1") {
		if rep.Generation == gen && rep.Outcome == "failed" {
			t.Fatalf("the bomb was retried as a failure: %+v", rep)
		}
	}
	if exists(filepath.Join(h.Root, "opt/bomb")) {
		t.Fatal("the tree was installed")
	}
	var refusal bool
	for _, e := range h.journal() {
		if e.Generation == gen && e.Outcome == "refused" && strings.Contains(e.Reason, "too large") {
			refusal = true
		}
	}
	if !refusal {
		t.Fatalf("the journal does not hold the refusal:\n%s", h.journalText())
	}
	if !listening(port) || copies(port) != 1 {
		t.Fatalf("the refusal disturbed the running service (listening %v, copies %d)", listening(port), copies(port))
	}
}
