package agent

import (
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

// TestFetch_AnEndlessAnswerIsBoundedByTheArtifactsSize: a blob whose declaration says
// it is 64 bytes, answered by something that is not the controller with
// bytes that never end. The host knows the size (signed) and the digest;
// it must stop reading past the size, not write the answer to its state
// dir until the disk is full or 30 minutes pass.
func TestFetch_AnEndlessAnswerIsBoundedByTheArtifactsSize(t *testing.T) {
	blob := make([]byte, 64)
	digest := models.DigestOf(blob)
	const cap = 256 << 20 // the server gives up after this much
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 1<<20)
		for written.Load() < cap {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	var maxPart atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if fi, err := os.Stat(filepath.Join(dir, "blobs", digest[7:]+".part")); err == nil && fi.Size() > maxPart.Load() {
				maxPart.Store(fi.Size())
			}
		}
	}()
	c := newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.fetchBlob(ctx, dir, digest, int64(len(blob)))
	close(stop)
	t.Logf("fetchBlob: %v; the server wrote %d MiB, the partial file reached %d MiB", err, written.Load()>>20, maxPart.Load()>>20)
	if err == nil {
		t.Fatal("an endless answer was taken as the blob")
	}
	if w := written.Load(); w > 16<<20 {
		t.Fatalf("the host read %d MiB for a blob declared 64 bytes (partial file up to %d MiB): the download is not bounded by the size it knows", w>>20, maxPart.Load()>>20)
	}
}
