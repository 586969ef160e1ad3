package api_test

import (
	"net/http"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestInstall_AnonymousBinaryFloodCostsTheStoreLittle: the install pace
// per address was loosened from 10 at once, then 5 a second, to 500 at
// once, then 20 a second, because the script is now made from one store
// read a second. But the binary's route, paced by the same limiter, still
// read the store's releases on every request, before the digest was even
// known to be a release's: an outsider naming any digest cost the store a
// read a request. It judges by the same facts, read once a second.
func TestInstall_AnonymousBinaryFloodCostsTheStoreLittle(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	if resp, b := e.UploadRelease(e.Admin, "1.0.0", []byte("mesh-host, not really")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	statements := func() float64 { return scrape(t, e)["mesh_store_statements_total"] }
	before := statements()
	const n = 200
	answered := map[int]int{}
	for range n {
		resp, _ := e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install/mesh-host/sha256:" + strings.Repeat("0", 64)})
		answered[resp.StatusCode]++
	}
	spent := statements() - before
	t.Logf("%d anonymous binary downloads of a made-up digest (answers %v): %.0f store statements", n, answered, spent)
	if spent > n/4 {
		t.Fatalf("%d anonymous GET /install/mesh-host/<digest> cost %.0f store statements (answers %v): the script's flood moved to the binary's route, paced 50 times looser than before", n, spent, answered)
	}
}
