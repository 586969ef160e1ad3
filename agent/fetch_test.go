package agent

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"mesh/models"
)

// blobServer serves blob b by range, or answers status when status is
// not 0; it counts what it was asked.
func blobServer(t *testing.T, b []byte, status int) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if status != 0 {
			http.Error(w, "draining", status)
			return
		}
		http.ServeContent(w, r, "blob", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// TestFetchBlob_GoesOnFromAnotherController: a host with two controller
// URLs whose first answers 503 (draining) fetches a release from the
// second, as its polls and reports would, where it tried the first three
// times and refused the release — halting the whole rollout.
func TestFetchBlob_GoesOnFromAnotherController(t *testing.T) {
	blob := []byte("a mesh-host binary, say")
	digest := models.DigestOf(blob)
	draining, drainingHits := blobServer(t, nil, http.StatusServiceUnavailable)
	good, goodHits := blobServer(t, blob, 0)
	c := newClient(&Identity{Controllers: []string{draining.URL, good.URL}, Token: "t"})
	path, err := c.fetchBlob(context.Background(), t.TempDir(), digest, int64(len(blob)))
	if err != nil {
		t.Fatalf("fetch: %v (draining asked %d times, the other %d)", err, drainingHits.Load(), goodHits.Load())
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, blob) || goodHits.Load() == 0 {
		t.Fatalf("fetched %q", got)
	}
}

// TestFetchBlob_APartialFileNotTheBlobsStartsOver: a partial download
// damaged by a power loss resumes into bytes that are not the artifact's;
// the host starts over once rather than refusing the release. A partial
// file that is whole already (cut off before its rename) is taken as it
// is, where the controller's 416 to its resume left it empty and refused.
func TestFetchBlob_APartialFileNotTheBlobsStartsOver(t *testing.T) {
	blob := []byte("a mesh-host binary, longer than its damaged start")
	digest := models.DigestOf(blob)
	srv, _ := blobServer(t, blob, 0)
	for name, part := range map[string][]byte{"Damaged": []byte("XXXXXXXX"), "Whole": blob} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "blobs", digest[7:]+".part"), part, 0o600); err != nil {
				t.Fatal(err)
			}
			c := newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
			path, err := c.fetchBlob(context.Background(), dir, digest, int64(len(blob)))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, blob) {
				t.Fatalf("fetched %q", got)
			}
		})
	}
}
