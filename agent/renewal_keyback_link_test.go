package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"mesh/models"
)

// B's owner (nobody, its own directory) plants a link at B's key path to
// A's key and a directory at B's chain path. The host finds B broken and
// issues it anew: it reads "the key before it" through the link (A's
// private key), its chain cannot be written (a directory is in the way),
// and it puts "the key before it" back: A's private key, now a regular
// file at B's key path. nobody puts A's (public) chain beside it; the next
// apply finds B on disk and valid and gives its key, A's private key, to
// nobody.
func TestCertificate_KeyPutBackIsNotReadThroughALink(t *testing.T) {
	a := testAgent(t)
	var refuse atomic.Bool
	certController(t, a, &refuse)
	ca := models.Resource{ID: "a.cert", Module: "a", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/a/chain.pem", KeyPath: "/etc/a/key.pem", Mode: "0600", Owner: "daemon", Lifetime: "1h"}
	cb := models.Resource{ID: "b.cert", Module: "b", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/srv/b/chain.pem", KeyPath: "/srv/b/key.pem", Mode: "0600", Owner: "nobody", Lifetime: "1h"}
	if _, err := applyAs(t, a, 1, ca, cb); err != nil {
		t.Fatal(err)
	}
	a.state.Applied, a.state.AppliedSend = 1, "0193b1f2-0000-7000-8000-000000000001"
	dir := filepath.Join(a.root.dir, "srv/b")
	_ = os.Chown(dir, 65534, 65534) // nobody's own directory
	// nobody's doing (it owns the directory):
	_ = os.Remove(filepath.Join(dir, "key.pem"))
	if err := os.Symlink("../../etc/a/key.pem", filepath.Join(dir, "key.pem")); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(dir, "chain.pem"))
	if err := os.Mkdir(filepath.Join(dir, "chain.pem"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The poll loop: B is broken, so it is issued anew, and fails.
	a.renewDue(context.Background())
	// nobody again: A's chain is public.
	_ = os.Remove(filepath.Join(dir, "chain.pem"))
	achain, err := os.ReadFile(filepath.Join(a.root.dir, "etc/a/chain.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chain.pem"), achain, 0o644); err != nil {
		t.Fatal(err)
	}
	// The next generation (the same certificates).
	if _, err := applyAs(t, a, 2, ca, cb); err != nil {
		t.Logf("apply 2: %v", err)
	}
	akey, _ := os.ReadFile(filepath.Join(a.root.dir, "etc/a/key.pem"))
	bkey, _ := os.ReadFile(filepath.Join(dir, "key.pem"))
	var st syscall.Stat_t
	_ = syscall.Stat(filepath.Join(dir, "key.pem"), &st)
	if bytes.Equal(akey, bkey) {
		t.Fatalf("A's private key is at B's key path as a regular file (uid %d; nobody is 65534): read through the link planted there as 'the key before it' and put back", st.Uid)
	}
}
