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
	written, maxPart, err := fetchEndless(t, models.DigestOf(blob), int64(len(blob)))
	if err == nil {
		t.Fatal("an endless answer was taken as the blob")
	}
	if written > 16<<20 {
		t.Fatalf("the host read %d MiB for a blob declared 64 bytes (partial file up to %d MiB): the download is not bounded by the size it knows", written>>20, maxPart>>20)
	}
}

// An artifact signed as 0 bytes has a known size too: its download was
// left unbounded, written to the state dir's disk for up to 30 minutes.
func TestFetch_AnEmptyArtifactsDownloadIsBoundedToo(t *testing.T) {
	written, _, _ := fetchEndless(t, models.DigestOf(nil), 0)
	if written > 16<<20 {
		t.Fatalf("the host read %d MiB for an artifact signed as 0 bytes: its download is not bounded", written>>20)
	}
}

// fetchEndless fetches the blob digest of size from a server whose answer
// never ends (it gives up after 256 MiB), and says how fetchBlob ended,
// how much the server wrote and how large the partial file grew.
func fetchEndless(t *testing.T, digest string, size int64) (written, maxPart int64, err error) {
	t.Helper()
	const cap = 256 << 20
	var wrote atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := make([]byte, 1<<20)
		for wrote.Load() < cap {
			n, err := w.Write(chunk)
			wrote.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	var part atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the partial file's size, for the failure's words
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if fi, err := os.Stat(filepath.Join(dir, "blobs", digest[7:]+".part")); err == nil && fi.Size() > part.Load() {
				part.Store(fi.Size())
			}
		}
	}()
	c := newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = c.fetchBlob(ctx, dir, digest, size)
	close(stop)
	<-sampled
	t.Logf("fetchBlob: %v; the server wrote %d MiB, the partial file reached %d MiB", err, wrote.Load()>>20, part.Load()>>20)
	return wrote.Load(), part.Load(), err
}
