package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// randomBytes is n bytes that do not compress, the same for the same seed.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func countRows(t *testing.T, s *store.Store, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.DB().Raw(query, args...).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func mustPut(t *testing.T, s *store.Store, data []byte) *models.Blob {
	t.Helper()
	b, err := s.PutBlob(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readAll(t *testing.T, s *store.Store, digest string) []byte {
	t.Helper()
	_, r, err := s.OpenBlob(context.Background(), digest)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBlobs_RoundTrip: the bytes put come back, under their sha256, in
// chunks of ChunkSize; putting them again stores nothing more.
func TestBlobs_RoundTrip(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		data := randomBytes(2*store.ChunkSize+12345, 1)
		b := mustPut(t, s, data)
		if b.Digest != models.DigestOf(data) || b.Size != int64(len(data)) || b.ChunkSize != store.ChunkSize {
			t.Fatalf("stored %+v; want %s, %d bytes", b, models.DigestOf(data), len(data))
		}
		if got := readAll(t, s, b.Digest); !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes back, not the %d put", len(got), len(data))
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM blob_chunks WHERE digest = ?", b.Digest); n != 3 {
			t.Fatalf("%d chunks; want 3", n)
		}
		again := mustPut(t, s, data)
		if again.Digest != b.Digest {
			t.Fatalf("the same bytes again: %s", again.Digest)
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM blob_chunks"); n != 3 {
			t.Fatalf("after the same bytes again, %d chunks; want 3", n)
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM blobs WHERE digest NOT LIKE 'sha256:%'"); n != 0 {
			t.Fatalf("%d uploads in progress left behind", n)
		}
		empty := mustPut(t, s, nil)
		if empty.Digest != models.DigestOf(nil) || len(readAll(t, s, empty.Digest)) != 0 {
			t.Fatalf("the empty blob: %+v", empty)
		}
		if _, _, err := s.OpenBlob(context.Background(), models.DigestOf([]byte("never put"))); !errors.Is(err, models.ErrNotFound) {
			t.Fatalf("a blob never put: %v", err)
		}
	})
}

// TestBlobs_RangeReadsOnlyItsChunks: a range is served by reading the head
// and the chunks the range touches, nothing else (http.ServeContent over
// the blob's reader, as GET /api/v1/blobs serves it).
func TestBlobs_RangeReadsOnlyItsChunks(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		data := randomBytes(5*store.ChunkSize, 2)
		b := mustPut(t, s, data)
		for _, tc := range []struct {
			name       string
			rng        string
			from, to   int
			statements int64
		}{
			{"First100", "bytes=0-99", 0, 100, 2},
			{"InsideChunk3", "bytes=3145800-3145899", 3145800, 3145900, 2},
			{"AcrossChunks1And2", "bytes=2097100-2097199", 2097100, 2097200, 3},
			{"Last10", "bytes=-10", len(data) - 10, len(data), 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := s.Statements()
				head, content, err := s.OpenBlob(context.Background(), b.Digest)
				if err != nil {
					t.Fatal(err)
				}
				req := httptest.NewRequest("GET", "/blob", nil)
				req.Header.Set("Range", tc.rng)
				w := httptest.NewRecorder()
				w.Header().Set("ETag", `"`+b.Digest+`"`)
				w.Header().Set("Content-Type", "application/octet-stream")
				http.ServeContent(w, req, "blob", head.CreatedAt, content)
				if w.Code != http.StatusPartialContent || !bytes.Equal(w.Body.Bytes(), data[tc.from:tc.to]) {
					t.Fatalf("%s: %d, %d bytes", tc.rng, w.Code, w.Body.Len())
				}
				if n := s.Statements() - before; n != tc.statements {
					t.Fatalf("%s took %d statements; want %d (the head and the chunks it touches)", tc.rng, n, tc.statements)
				}
			})
		}
		t.Run("IfNoneMatch", func(t *testing.T) {
			before := s.Statements()
			head, content, err := s.OpenBlob(context.Background(), b.Digest)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", "/blob", nil)
			req.Header.Set("If-None-Match", `"`+b.Digest+`"`)
			w := httptest.NewRecorder()
			w.Header().Set("ETag", `"`+b.Digest+`"`)
			http.ServeContent(w, req, "blob", head.CreatedAt, content)
			if w.Code != http.StatusNotModified || s.Statements()-before != 1 {
				t.Fatalf("If-None-Match the digest: %d after %d statements; want 304 after the head alone", w.Code, s.Statements()-before)
			}
		})
	})
}

// watchedUpload is an upload that checks, at every read, that what it has
// handed over is in the store but for at most one chunk: the mechanism by
// which no upload is held whole.
type watchedUpload struct {
	t       *testing.T
	s       *store.Store
	r       io.Reader
	handed  int64
	maxRead int
	lagged  int64 // most bytes handed over and not yet in blob_chunks
}

func (w *watchedUpload) Read(p []byte) (int, error) {
	stored := countRows(w.t, w.s, "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM blob_chunks")
	w.lagged = max(w.lagged, w.handed-stored)
	w.maxRead = max(w.maxRead, len(p))
	n, err := w.r.Read(p)
	w.handed += int64(n)
	return n, err
}

// TestBlobs_LargeUploadNeverHeldWhole: a 40 MiB upload is asked for in
// pieces of at most a chunk, and each chunk is in the store before the
// next is read: the store never holds more than one chunk of it.
func TestBlobs_LargeUploadNeverHeldWhole(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		const size = 40 << 20
		h := sha256.New()
		src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{3}), size), h)
		w := &watchedUpload{t: t, s: s, r: src}
		b, err := s.PutBlob(context.Background(), w)
		if err != nil {
			t.Fatal(err)
		}
		if w.maxRead > store.ChunkSize || w.lagged > store.ChunkSize {
			t.Fatalf("read in pieces of up to %d bytes, up to %d bytes read and not stored; want at most one chunk (%d)", w.maxRead, w.lagged, store.ChunkSize)
		}
		want := "sha256:" + hex.EncodeToString(h.Sum(nil))
		if b.Digest != want || b.Size != size {
			t.Fatalf("stored %+v; want %s, %d bytes", b, want, size)
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM blob_chunks WHERE digest = ?", want); n != size/store.ChunkSize {
			t.Fatalf("%d chunks; want %d", n, size/store.ChunkSize)
		}
		_, r, err := s.OpenBlob(context.Background(), b.Digest)
		if err != nil {
			t.Fatal(err)
		}
		back := sha256.New()
		if n, err := io.Copy(back, r); err != nil || n != size {
			t.Fatalf("read back %d bytes: %v", n, err)
		}
		if got := "sha256:" + hex.EncodeToString(back.Sum(nil)); got != want {
			t.Fatalf("read back %s; want %s", got, want)
		}
	})
}

// failingReader fails after n bytes, as a client that goes away does.
type failingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	p = p[:min(int64(len(p)), f.n)]
	n, err := f.r.Read(p)
	f.n -= int64(n)
	return n, err
}

// TestBlobs_FailedUploadLeavesNothing: an upload whose body fails midway
// returns the body's error (so a body over its limit stays one) and
// leaves no chunk and no upload behind.
func TestBlobs_FailedUploadLeavesNothing(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		gone := errors.New("client went away")
		_, err := s.PutBlob(context.Background(), &failingReader{r: bytes.NewReader(randomBytes(5*store.ChunkSize, 4)), n: 2*store.ChunkSize + 7, err: gone})
		if !errors.Is(err, gone) {
			t.Fatalf("a failed body: %v", err)
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM blob_chunks"); n != 0 {
			t.Fatalf("%d chunks left", n)
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM blobs"); n != 0 {
			t.Fatalf("%d blob rows left", n)
		}
	})
}

// TestBlobs_SweepTakesOnlyWhatNothingNames: an upload sweeps blobs older
// than BlobGrace that no build names, and uploads never finished (a crash
// left them); a blob a build names is kept.
func TestBlobs_SweepTakesOnlyWhatNothingNames(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		start := time.Now().UTC()
		s.Now = func() time.Time { return start }
		named := mustPut(t, s, []byte("a build names me"))
		orphan := mustPut(t, s, randomBytes(store.ChunkSize+1, 5))
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "mod", Kind: models.KindService, SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: `{"resources": []}`, Digest: named.Digest, Size: named.Size}, named); err != nil {
			t.Fatal(err)
		}
		// What a crash mid-upload leaves: an upload's head and a chunk.
		if err := s.DB().Exec("INSERT INTO blobs (digest, size, chunk_size, data, created_at) VALUES ('upload:crashed', 0, ?, ?, ?)", store.ChunkSize, []byte{}, start).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Exec("INSERT INTO blob_chunks (digest, seq, data) VALUES ('upload:crashed', 0, ?)", []byte("half")).Error; err != nil {
			t.Fatal(err)
		}

		s.Now = func() time.Time { return start.Add(store.BlobGrace / 2) }
		mustPut(t, s, []byte("young"))
		if n := countRows(t, s, "SELECT COUNT(*) FROM blobs"); n != 4 {
			t.Fatalf("within the grace, %d blob rows; want all 4 kept", n)
		}

		s.Now = func() time.Time { return start.Add(store.BlobGrace + time.Minute) }
		mustPut(t, s, []byte("later"))
		var left []string
		if err := s.DB().Raw("SELECT digest FROM blobs ORDER BY digest").Scan(&left).Error; err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.Join(left, " "), orphan.Digest) || strings.Contains(strings.Join(left, " "), "upload:") || len(left) != 3 {
			t.Fatalf("after the grace: %v; want the named, young and later blobs", left)
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM blob_chunks WHERE digest IN (?, 'upload:crashed')", orphan.Digest); n != 0 {
			t.Fatalf("%d swept chunks left", n)
		}
		if !bytes.Equal(readAll(t, s, named.Digest), []byte("a build names me")) {
			t.Fatal("the named blob changed")
		}
	})
}

// TestBlobs_StoredBeforeChunks: a blob stored as one row (before
// migration 0008) is chunked by the migration and served; one an older
// controller writes beside a newer one (chunk_size 0) is read as one chunk.
func TestBlobs_StoredBeforeChunks(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			ctx := context.Background()
			s, err := store.Open(ctx, storetest.Config(t, d))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.MigrateTo(ctx, 7); err != nil {
				t.Fatal(err)
			}
			old := randomBytes(3*store.ChunkSize+99, 6)
			small := []byte("a small old blob")
			for _, b := range [][]byte{old, small} {
				if err := s.DB().Exec("INSERT INTO blobs (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
					models.DigestOf(b), len(b), b, time.Now().UTC()).Error; err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			for _, b := range [][]byte{old, small} {
				if got := readAll(t, s, models.DigestOf(b)); !bytes.Equal(got, b) {
					t.Fatalf("an old blob of %d bytes read back as %d", len(b), len(got))
				}
			}
			if n := countRows(t, s, "SELECT COUNT(*) FROM blob_chunks WHERE digest = ?", models.DigestOf(old)); n != 4 {
				t.Fatalf("the old blob is %d chunks; want 4", n)
			}

			// As a build older than 0008 writes one: no chunk_size, the bytes in data.
			beside := randomBytes(store.ChunkSize+5, 7)
			if err := s.DB().Exec("INSERT INTO blobs (digest, size, data, created_at) VALUES (?, ?, ?, ?)",
				models.DigestOf(beside), len(beside), beside, time.Now().UTC()).Error; err != nil {
				t.Fatal(err)
			}
			_, r, err := s.OpenBlob(ctx, models.DigestOf(beside))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Seek(store.ChunkSize, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			if tail, err := io.ReadAll(r); err != nil || !bytes.Equal(tail, beside[store.ChunkSize:]) {
				t.Fatalf("the tail of a one-row blob: %d bytes, %v", len(tail), err)
			}
		})
	}
}

// TestBlobs_StorageFull: a write the disk has no room for is
// models.ErrStorageFull (the API answers 507), and the upload's chunks
// are gone. SQLite is filled for real (max_page_count); PostgreSQL's
// disk_full is mapped from its SQLSTATE.
func TestBlobs_StorageFull(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s := storetest.MustOpen(t, store.SQLite)
		sqlDB, err := s.DB().DB()
		if err != nil {
			t.Fatal(err)
		}
		// One connection, so the page limit (a per-connection pragma) holds for every write.
		sqlDB.SetMaxOpenConns(1)
		var pages int64
		if err := s.DB().Raw("PRAGMA page_count").Scan(&pages).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Exec(fmt.Sprintf("PRAGMA max_page_count = %d", pages+2*store.ChunkSize/4096)).Error; err != nil {
			t.Fatal(err)
		}
		_, err = s.PutBlob(context.Background(), bytes.NewReader(randomBytes(8*store.ChunkSize, 8)))
		if !errors.Is(err, models.ErrStorageFull) {
			t.Fatalf("an upload past the disk: %v", err)
		}
		if n := countRows(t, s, "SELECT COUNT(*) FROM blob_chunks"); n != 0 {
			t.Fatalf("%d chunks of the failed upload left", n)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		full := &pgconn.PgError{Severity: "ERROR", Code: "53100", Message: `could not extend file "base/16384/16599": No space left on device`}
		if err := store.MapErr(full); !errors.Is(err, models.ErrStorageFull) {
			t.Fatalf("disk_full: %v", err)
		}
		if err := store.MapErr(&pgconn.PgError{Code: "23505"}); errors.Is(err, models.ErrStorageFull) {
			t.Fatal("a unique violation taken for a full disk")
		}
	})
}

// peakRSSGrowth runs f and returns how far the process's peak resident
// memory (VmHWM) rose above what it was resident when f began: the peak
// is reset first (clear_refs 5), so what earlier tests peaked at hides
// nothing.
func peakRSSGrowth(t *testing.T, f func()) int64 {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak RSS: %v", err)
	}
	before := procStatus(t, "VmHWM")
	f()
	return procStatus(t, "VmHWM") - before
}

// procStatus is a field of /proc/self/status in bytes.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /proc/self/status", field)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << 10
}

// TestPutBlob_MemoryStaysFlat: storing an artifact, and storing the same
// bytes again (whose chunks are then dropped), keeps the controller's
// memory near a chunk's, whatever the artifact's size. Moving an upload's
// chunks under its digest in one statement made SQLite keep a statement
// journal of every chunk's pages, in memory (temp_store): twice the
// artifact, a 300 MiB upload raising the controller's peak by 634 MiB.
func TestPutBlob_MemoryStaysFlat(t *testing.T) {
	const size = 64 << 20
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		stream := func() io.Reader { return io.LimitReader(rand.NewChaCha8([32]byte{7}), size) }
		runtime.GC()
		grew := peakRSSGrowth(t, func() {
			if _, err := s.PutBlob(ctx, stream()); err != nil {
				t.Fatal(err)
			}
			if _, err := s.PutBlob(ctx, stream()); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: peak RSS +%.1f MiB storing a %d MiB artifact twice", s.Dialect(), float64(grew)/(1<<20), size>>20)
		if grew > size/2 {
			t.Fatalf("peak RSS grew %.1f MiB storing a %d MiB artifact; want under %d MiB", float64(grew)/(1<<20), size>>20, size>>21)
		}
	})
}
