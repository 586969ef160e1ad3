package api_test

import (
	"net/http"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestInstall_AnonymousScriptFloodCostsTheStoreLittle: /install.sh is
// served to anyone, and each request read the fleet's default, up to
// 1,000 host releases with their signatures and the declaration keys from
// the store, uncached (/metrics, also anonymous, serves one read for 5 s).
// Measured against the real binary over TLS with 81 releases: 50
// keep-alive connections from one address asked ~1,080 a second, the
// controller's core was saturated, and a host's change took 1.6 s (p50;
// 2.5 s p99) to be applied instead of 60 ms, a fresh /healthz 0.8 s. An
// address asks at a pace (then 429 with Retry-After, on the record), so
// its flood costs the store a bounded number of reads.
func TestInstall_AnonymousScriptFloodCostsTheStoreLittle(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	if resp, b := e.UploadRelease(e.Admin, "1.0.0", []byte("mesh-host, not really")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	statements := func() float64 { return scrape(t, e)["mesh_store_statements_total"] }
	before := statements()
	const n = 200
	served, refused := 0, 0
	for range n {
		switch resp, b := e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install.sh"}); resp.StatusCode {
		case http.StatusOK:
			served++
		case http.StatusTooManyRequests:
			if resp.Header.Get("Retry-After") == "" {
				t.Fatalf("a refused install.sh says not when to come back: %.200s", b)
			}
			refused++
		default:
			t.Fatalf("install.sh: %d %.200s", resp.StatusCode, b)
		}
	}
	if served == 0 {
		t.Fatal("not one install.sh was served")
	}
	spent := statements() - before
	t.Logf("%d anonymous /install.sh (%d served, %d refused): %.0f store statements", n, served, refused, spent)
	if spent > n/4 {
		t.Fatalf("%d anonymous GET /install.sh cost %.0f store statements: each request reads the store, so one address's flood saturates the controller", n, spent)
	}
}
