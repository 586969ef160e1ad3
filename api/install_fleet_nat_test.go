package api_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"sync"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestInstall_AFleetBehindOneAddressInstalls: a fleet brought up at once
// (cloud-init on 25 machines behind one NAT gateway, or one egress proxy)
// runs the join token's one-liner on each machine: one GET /install.sh
// each, then one download of the release's binary each. Enrolment allows
// such a fleet a burst of 500 from one address; the install pace refused
// all but 10 scripts (429), and the script's own download of the binary
// had no --retry, so a 503 past 4 downloads at once from the address
// ended that machine's install. The pace is enrolment's, and the script
// retries.
func TestInstall_AFleetBehindOneAddressInstalls(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	binary := bytes.Repeat([]byte("mesh-host, not really\n"), 1000)
	if resp, b := e.UploadRelease(e.Admin, "1.0.0", binary); resp.StatusCode != http.StatusCreated {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	sum := sha256.Sum256(binary)
	resp, script := e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install.sh"})
	if resp.StatusCode == http.StatusOK && bytes.Contains(script, []byte("/install/mesh-host/")) && !bytes.Contains(script, []byte("--retry")) {
		t.Errorf("install.sh downloads the binary with no retry, but a 5th download at once from one address is now 503 with Retry-After (digest %s)", hex.EncodeToString(sum[:8]))
	}
	const machines = 25
	var wg sync.WaitGroup
	codes := make(chan int, machines)
	for range machines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := e.HTTP.Get(e.URL + "/install.sh")
			if err != nil {
				codes <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	refused := 0
	for c := range codes {
		if c != http.StatusOK {
			refused++
		}
	}
	if refused > 0 {
		t.Errorf("%d machines behind one address ran the install one-liner at once: %d were refused /install.sh (and the one-liner retries nothing)", machines, refused)
	}
}
