package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"mesh/models"
)

// An artifact the declaration signs as 0 bytes (an empty file) is a size
// known as well as 64: an answer that goes on is not it. The bound of
// download applies only to size > 0, so for an empty artifact the host
// writes whatever comes to its state dir.
// An artifact signed as 0 bytes has a known size too: its download was
// left unbounded, written to the state dir's disk for up to 30 minutes.
func TestFetch_AnEmptyArtifactsDownloadIsBoundedToo(t *testing.T) {
	digest := models.DigestOf(nil)
	const cap = 256 << 20
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
	c := newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.fetchBlob(ctx, t.TempDir(), digest, 0)
	t.Logf("fetchBlob: %v; the server wrote %d MiB", err, written.Load()>>20)
	if w := written.Load(); w > 16<<20 {
		t.Fatalf("the host read %d MiB for an artifact signed as 0 bytes: its download is not bounded", w>>20)
	}
}
