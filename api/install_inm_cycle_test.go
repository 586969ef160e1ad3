package api_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestInstall_NotModifiedCostsNoBinaryRead: a download whose client
// already has the binary (If-None-Match its digest) is answered 304
// without a byte; before 75c13ce it opened the blob and read none of its
// chunks. It then loaded the whole binary into installBlobs first, and
// with more ready releases than the four kept, asking for five digests in
// turn made every 304 a read of a whole binary from the store.
func TestInstall_NotModifiedCostsNoBinaryRead(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	var digests []string
	for i := range 5 {
		binary := make([]byte, 8<<20)
		_, _ = rand.Read(binary)
		if resp, b := e.UploadRelease(e.Admin, fmt.Sprintf("1.0.%d", i), binary); resp.StatusCode != http.StatusCreated {
			t.Fatalf("release: %d %s", resp.StatusCode, b)
		}
		sum := sha256.Sum256(binary)
		digests = append(digests, "sha256:"+hex.EncodeToString(sum[:]))
	}
	statements := func() float64 { return scrape(t, e)["mesh_store_statements_total"] }
	before := statements()
	const n = 40
	for i := range n {
		d := digests[i%len(digests)]
		resp, _ := e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install/mesh-host/" + d, Header: map[string]string{"If-None-Match": `"` + d + `"`}})
		if resp.StatusCode != http.StatusNotModified {
			t.Fatalf("If-None-Match its own digest: %d", resp.StatusCode)
		}
	}
	spent := statements() - before
	t.Logf("%d answers 304 cost %.0f store statements", n, spent)
	// A releases read and a blob's row each would be 2n.
	if spent > 3*n {
		t.Fatalf("%d downloads answered 304, not a byte of a binary sent, cost %.0f store statements: each read a whole 8 MiB binary from the store", n, spent)
	}
}
