package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gzipBomb is a tar.gz of about 1 MiB holding one regular file of size
// bytes of zeros. It is made of gzip members (the reader reads them as one
// stream): the tar header, then the same compressed MiB of zeros again and
// again, so building it costs nothing. With body false only the header is
// there: an archive that claims size bytes and holds none of them.
func gzipBomb(tb testing.TB, size int64, body bool) []byte {
	tb.Helper()
	member := func(b []byte) []byte {
		var buf bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = gz.Write(b)
		_ = gz.Close()
		return buf.Bytes()
	}
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		tb.Fatal(err)
	}
	tw.Flush() // the header block only; the body follows as zeros
	out := member(hdr.Bytes())
	if !body {
		return out
	}
	const mib = 1 << 20
	zeros := member(make([]byte, mib))
	for range size/mib + 1 { // the body, then the end-of-archive blocks
		out = append(out, zeros...)
	}
	return out
}

// TestTree_GzipBombRefusedBeforeWriting: a 1 MiB archive that expands to
// 1 GiB is refused under the default ceilings, like an escape (a refusal,
// not a failure to retry), and nothing of it is left on disk.
func TestTree_GzipBombRefusedBeforeWriting(t *testing.T) {
	a := testAgent(t)
	bomb := gzipBomb(t, 1<<30, true)
	if len(bomb) > 2<<20 {
		t.Fatalf("the bomb is %d bytes; meant to be about 1 MiB", len(bomb))
	}
	st := a.state.clone()
	_, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, bomb), "/opt/bomb"), st)
	var rf *refusal
	if !errors.As(err, &rf) || !strings.Contains(rf.reason, "too large") {
		t.Fatalf("a 1 MiB archive of 1 GiB was not refused as too large: %v", err)
	}
	if exists(filepath.Join(a.root.dir, "opt/bomb")) {
		t.Fatal("the tree was installed")
	}
	ents, _ := os.ReadDir(filepath.Join(a.root.dir, "opt/.bomb.mesh"))
	if len(ents) != 0 {
		t.Fatalf("unpacking left %d entries behind", len(ents))
	}
}

// TestTree_CeilingsDecidedByHeaders: the ceilings are judged on an entry's
// header before its bytes are written. An archive that claims 1 GiB but
// holds none of it is refused as too large; code that wrote first would
// instead fail (and retry) on the missing bytes.
func TestTree_CeilingsDecidedByHeaders(t *testing.T) {
	a := testAgent(t)
	st := a.state.clone()
	_, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, gzipBomb(t, 1<<30, false)), "/opt/claim"), st)
	var rf *refusal
	if !errors.As(err, &rf) || !strings.Contains(rf.reason, "too large") {
		t.Fatalf("refused on the header? %v", err)
	}
}

// TestTree_Ceilings: each ceiling refuses what passes it and lets through
// what stays at it.
func TestTree_Ceilings(t *testing.T) {
	many := func(n int) []tarEntry {
		var es []tarEntry
		for i := range n {
			es = append(es, tarEntry{name: fmt.Sprintf("f%03d", i), body: "x"})
		}
		return es
	}
	big := strings.Repeat("a", 4000)
	for _, tc := range []struct {
		name   string
		limits UnpackLimits
		tar    []tarEntry
		says   string // "" means: unpacked
	}{
		{"entries at the ceiling", UnpackLimits{MaxEntries: 10}, many(10), ""},
		{"entries past the ceiling", UnpackLimits{MaxEntries: 10}, many(11), "more than 10 entries"},
		{"directories count as entries", UnpackLimits{MaxEntries: 2}, []tarEntry{{name: "d/", typ: tar.TypeDir}, {name: "d/e/", typ: tar.TypeDir}, {name: "d/e/f", body: "x"}}, "more than 2 entries"},
		{"file at the ceiling", UnpackLimits{MaxFileBytes: 4000}, []tarEntry{{name: "f", body: big}}, ""},
		{"file past the ceiling", UnpackLimits{MaxFileBytes: 3999}, []tarEntry{{name: "f", body: big}}, "per-file ceiling of 3999"},
		{"total at the ceiling", UnpackLimits{MaxBytes: 8000}, []tarEntry{{name: "f", body: big}, {name: "g", body: big}}, ""},
		{"total past the ceiling", UnpackLimits{MaxBytes: 7999}, []tarEntry{{name: "f", body: big}, {name: "g", body: big}}, "more than 7999 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := testAgent(t)
			a.cfg.Unpack = tc.limits
			a.cfg.Unpack.Defaults()
			st := a.state.clone()
			_, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, makeTar(t, tc.tar...)), "/opt/t"), st)
			if tc.says == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var rf *refusal
			if !errors.As(err, &rf) || !strings.Contains(rf.reason, "too large") || !strings.Contains(rf.reason, tc.says) {
				t.Fatalf("want a refusal saying %q, got %v", tc.says, err)
			}
			if exists(filepath.Join(a.root.dir, "opt/t")) {
				t.Fatal("the tree was installed")
			}
		})
	}
}

// TestTree_RatioCeiling: past the floor, an archive may unpack at most
// MaxRatio times its own size.
func TestTree_RatioCeiling(t *testing.T) {
	a := testAgent(t)
	a.cfg.Unpack.MaxRatio = 10
	// 4 MiB of one letter compresses far better than 10:1.
	tr := makeTar(t, tarEntry{name: "f", body: strings.Repeat("a", 4<<20)})
	st := a.state.clone()
	_, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, tr), "/opt/r"), st)
	var rf *refusal
	if !errors.As(err, &rf) || !strings.Contains(rf.reason, fmt.Sprintf("10 times the artifact's %d bytes", len(tr))) {
		t.Fatalf("ratio: %v", err)
	}
	// Under the floor, a small archive that compresses well is fine.
	small := makeTar(t, tarEntry{name: "f", body: strings.Repeat("a", 512<<10)})
	if _, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, small), "/opt/s"), st); err != nil {
		t.Fatal(err)
	}
}
