package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"mesh/store"
	"mesh/store/storetest"
)

// blobBenchSize is the artifact the blob benchmark uploads and downloads.
const blobBenchSize = 300 << 20

// BenchmarkBlobMemory: a 300 MiB build upload, then two parallel
// downloads of it, against a controller process of its own. It reports how
// much the controller's peak resident memory (VmHWM) grew past what it had
// once started: after the upload, and after the downloads. Target: under
// 64 MiB, whatever the artifact's size (the store keeps it in 1 MiB
// chunks, the API streams it both ways).
func BenchmarkBlobMemory(b *testing.B) {
	bin := b.TempDir()
	build(b, bin, "mesh-controller", "./cmd/mesh-controller")
	for _, d := range []string{store.SQLite, store.Postgres} {
		b.Run(d, func(b *testing.B) {
			for range b.N {
				blobMemory(b, bin, d)
			}
		})
	}
}

func blobMemory(b *testing.B, bin, dialect string) {
	cfg := storetest.Config(b, dialect)
	admin, _, _ := seed(b, cfg, 0, 0)
	port := freePort(b)
	url := "http://127.0.0.1:" + port
	args := []string{"serve", "--listen", "127.0.0.1:" + port, "--data", cfg.DataDir, "--log-level", "warn"}
	if cfg.DatabaseURL != "" {
		args = append(args, "--database", cfg.DatabaseURL)
	}
	ctl := exec.Command(filepath.Join(bin, "mesh-controller"), args...)
	ctl.Stdout, ctl.Stderr = io.Discard, os.Stderr
	if err := ctl.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ctl.Process.Signal(os.Interrupt); _ = ctl.Wait() }()
	waitUntil(b, 30*time.Second, func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	base := vmHWM(b, ctl.Process.Pid)

	t0 := time.Now()
	digest := uploadBuild(b, url, admin, blobBenchSize)
	upTime := time.Since(t0)
	afterUp := vmHWM(b, ctl.Process.Pid)

	t0 = time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() { errs <- download(url, admin, digest, blobBenchSize) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	downTime := time.Since(t0)
	afterDown := vmHWM(b, ctl.Process.Pid)

	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(mib(base), "base-VmHWM-MiB")
	b.ReportMetric(mib(afterUp-base), "upload-VmHWM-growth-MiB")
	b.ReportMetric(mib(afterDown-base), "total-VmHWM-growth-MiB")
	b.ReportMetric(upTime.Seconds(), "upload-s")
	b.ReportMetric(downTime.Seconds(), "2-downloads-s")
	b.Logf("%s: VmHWM %.0f MiB at start, +%.1f MiB after a %d MiB upload (%v), +%.1f MiB after two parallel downloads (%v)",
		dialect, mib(base), mib(afterUp-base), blobBenchSize>>20, upTime.Round(time.Millisecond), mib(afterDown-base), downTime.Round(time.Millisecond))
	if afterDown-base >= 64<<20 {
		b.Errorf("VmHWM grew %.1f MiB; the target is under 64 MiB", mib(afterDown-base))
	}
}

// uploadBuild posts a build whose artifact is size random bytes, streamed
// from a pipe (the digest field after the artifact, as the client only
// knows it then), and returns the artifact's digest.
func uploadBuild(b *testing.B, url, token string, size int64) string {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	digest := make(chan string, 1)
	go func() {
		_ = mw.WriteField("manifest", `{"resources": [{"name": "t", "kind": "tree", "path": "/opt/t"}]}`)
		_ = mw.WriteField("version", "1.0.0")
		w, err := mw.CreateFormFile("artifact", "artifact.tar.gz")
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(rand.NewChaCha8([32]byte{1}), size)); err != nil {
			pw.CloseWithError(err)
			return
		}
		d := "sha256:" + hex.EncodeToString(h.Sum(nil))
		digest <- d
		_ = mw.WriteField("digest", d)
		pw.CloseWithError(mw.Close())
	}()
	req, _ := http.NewRequest("POST", url+"/api/v1/modules/mod/builds", pr)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		b.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	return <-digest
}

// download reads the blob whole and checks its bytes against the digest.
func download(url, token, digest string, size int64) error {
	req, _ := http.NewRequest("GET", url+"/api/v1/blobs/"+digest, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download: %s", resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); n != size || got != digest {
		return fmt.Errorf("downloaded %d bytes, %s; want %d, %s", n, got, size, digest)
	}
	return nil
}

// vmHWM is a process's peak resident set size so far.
func vmHWM(b *testing.B, pid int) int64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(s)
	if m == nil {
		b.Fatal("no VmHWM")
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb * 1024
}
