package agent

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTree_SymlinkLeavingThroughAnotherSymlinkRefused pins what FuzzUnpack
// found: each symlink's target was checked only lexically, so d/up → ..
// (inside) then d/up2 → up/.. (lexically d, really the tree's parent)
// was installed, a link out of the tree for anything that follows it.
func TestTree_SymlinkLeavingThroughAnotherSymlinkRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		es   []tarEntry
	}{
		{"LinkThroughEarlierLink", []tarEntry{
			{name: "d/", typ: tar.TypeDir}, {name: "d/up", link: "..", typ: tar.TypeSymlink}, {name: "d/up2", link: "up/..", typ: tar.TypeSymlink}}},
		{"LinkThroughLaterLink", []tarEntry{
			{name: "x", link: "d/up/..", typ: tar.TypeSymlink}, {name: "d/", typ: tar.TypeDir}, {name: "d/up", link: "..", typ: tar.TypeSymlink}}},
		{"ChainOfLinks", []tarEntry{
			{name: "a/b/", typ: tar.TypeDir}, {name: "a/b/top", link: "../..", typ: tar.TypeSymlink},
			{name: "a/t", link: "b/top", typ: tar.TypeSymlink}, {name: "a/out", link: "t/..", typ: tar.TypeSymlink}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := testAgent(t)
			_, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, makeTar(t, tc.es...)), "/opt/bad"), a.state.clone())
			var rf *refusal
			if !errors.As(err, &rf) || !strings.Contains(rf.reason, "escape") {
				t.Fatalf("err = %v, want an escape refusal", err)
			}
			if _, err := os.Lstat(filepath.Join(a.root.dir, "opt/bad")); err == nil {
				t.Fatal("the tree was installed")
			}
		})
	}
	t.Run("OK_LinksThroughLinksInside", func(t *testing.T) {
		a := testAgent(t)
		ok := makeTar(t, tarEntry{name: "d/", typ: tar.TypeDir}, tarEntry{name: "d/up", link: "..", typ: tar.TypeSymlink},
			tarEntry{name: "bin/run", body: "x"}, tarEntry{name: "d/run", link: "up/bin/run", typ: tar.TypeSymlink},
			tarEntry{name: "loop", link: "loop", typ: tar.TypeSymlink})
		if _, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, ok), "/opt/ok"), a.state.clone()); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/ok/d/run")); err != nil || string(b) != "x" {
			t.Fatalf("%q %v", b, err)
		}
	})
}
