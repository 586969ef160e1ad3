package api_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/api"
	"mesh/controller/ctltest"
	"mesh/store"
)

// TestInstall_Script: /install.sh is served without a token, is a script
// sh can parse, and carries each published platform's release record
// (quoted, whatever its version holds) and the declaration keys.
func TestInstall_Script(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	resp, script := e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install.sh"})
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(script, []byte("#!/bin/sh\n")) {
		t.Fatalf("status %d: %.100s", resp.StatusCode, script)
	}
	if bytes.Contains(script, []byte("VERSION='")) {
		t.Error("a release in the script before any was published")
	}
	version := `1.0.0'$(touch pwned)`
	binary := []byte("#!/bin/sh\necho mesh-host\n")
	if resp, b := e.UploadRelease(e.Admin, version, binary); resp.StatusCode != http.StatusCreated {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	_, script = e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install.sh"})
	sum := sha256.Sum256(binary)
	for _, want := range []string{`VERSION='1.0.0'\''$(touch pwned)'`, "DIGEST='sha256:" + hex.EncodeToString(sum[:]) + "'",
		"-----BEGIN PUBLIC KEY-----", "ExecStart=/var/lib/mesh-host/bin/mesh-host launch --state /var/lib/mesh-host"} {
		if !bytes.Contains(script, []byte(want)) {
			t.Errorf("the script lacks %s", want)
		}
	}
	file := filepath.Join(t.TempDir(), "install.sh")
	if err := os.WriteFile(file, script, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", file).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
}

// TestInstall_Binary: only a ready host release's binary is served without
// a token; a module's artifact is not, and a malformed digest is 400.
func TestInstall_Binary(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	binary := []byte("mesh-host, not really")
	if resp, b := e.UploadRelease(e.Admin, "1.0.0", binary); resp.StatusCode != http.StatusCreated {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	sum := sha256.Sum256(binary)
	resp, b := e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install/mesh-host/sha256:" + hex.EncodeToString(sum[:])})
	if resp.StatusCode != http.StatusOK || !bytes.Equal(b, binary) {
		t.Fatalf("the release's binary: %d %q", resp.StatusCode, b)
	}
	e.JSON(ctltest.Request{Method: http.MethodPost, Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "app"}}, http.StatusCreated, nil)
	art := []byte("an artifact of a module")
	if resp, b := e.Upload(e.Admin, "app", `{"resources": []}`, art, ""); resp.StatusCode != http.StatusCreated {
		t.Fatalf("build: %d %s", resp.StatusCode, b)
	}
	asum := sha256.Sum256(art)
	resp, b = e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install/mesh-host/sha256:" + hex.EncodeToString(asum[:])})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "no ready host release") {
		t.Errorf("a module's artifact: %d %s", resp.StatusCode, b)
	}
	resp, _ = e.Do(ctltest.Request{Method: http.MethodGet, Path: "/install/mesh-host/sha256:xyz"})
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a malformed digest: %d", resp.StatusCode)
	}
}

// TestInstall_StalledDownloadCut: a client that asks for a release's
// binary (its digest is public) and stops reading is cut off once a write
// has waited BlobWriteIdle; it held the connection and a chunk's buffer
// for good (300 of them took 380 MB), there being no write timeout.
func TestInstall_StalledDownloadCut(t *testing.T) {
	was := api.BlobWriteIdle
	api.BlobWriteIdle = 300 * time.Millisecond
	t.Cleanup(func() { api.BlobWriteIdle = was })
	e := ctltest.Start(t, store.SQLite)
	binary := make([]byte, 16<<20)
	_, _ = rand.Read(binary)
	if resp, b := e.UploadRelease(e.Admin, "1.0.0", binary); resp.StatusCode != http.StatusCreated {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	sum := sha256.Sum256(binary)
	// (What the controller has already handed its socket still arrives;
	// the rest never does.)
	n := readAfterStalling(t, e.URL, "/install/mesh-host/sha256:"+hex.EncodeToString(sum[:]), api.BlobWriteIdle)
	if n >= int64(len(binary)) {
		t.Fatalf("read %d bytes of a %d-byte binary after stalling: the stalled download was never cut", n, len(binary))
	}
}

// A response larger than what the client's socket takes, never read, is
// cut after ResponseWriteIdle: before, openapi.yaml asked for by anyone
// and then left unread held its connection, a goroutine and a slot of
// the connection cap for good.
func TestResponse_StalledReaderCut(t *testing.T) {
	was := api.ResponseWriteIdle
	api.ResponseWriteIdle = 300 * time.Millisecond
	t.Cleanup(func() { api.ResponseWriteIdle = was })
	e := ctltest.Start(t, store.SQLite)
	resp, err := http.Get(e.URL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := readAfterStalling(t, e.URL, "/openapi.yaml", api.ResponseWriteIdle); n >= int64(len(whole)) {
		t.Fatalf("read %d bytes of a %d-byte spec after stalling: the stalled response was never cut", n, len(whole))
	}
}

// readAfterStalling asks for path on a connection of its own and reads
// nothing for ten times idle — the stall itself, the attack — then reads
// what comes, and says how many bytes that was. Its receive buffer and
// segments are small, as a client far away has, so the controller's
// socket takes some tens of KiB of the answer, not the whole of it.
func readAfterStalling(t *testing.T, url, path string, idle time.Duration) int64 {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
			_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1400)
		})
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	time.Sleep(10 * idle)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := io.Copy(io.Discard, conn)
	return n
}

// A request that announces a body and never sends it is answered within
// api.UnreadBodyWait and its connection closed after the answer: before,
// net/http read up to 256 KiB of the body it never got before answering —
// with no deadline for a GET — so a GET /healthz announcing a chunked body
// held its connection, and the probes' reserve with it, for good.
func TestRequest_BodyNeverSentIsAnsweredAndClosed(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	for _, req := range []string{
		"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET /api/v1/host/ca HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
		"POST /api/v1/machines/m1/push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET /install/mesh-host/sha256:" + strings.Repeat("0", 64) + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET /api/v1/blobs/sha256:" + strings.Repeat("0", 64) + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(conn, req)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: no answer while its body does not come: %v", strings.SplitN(req, "\r\n", 2)[0], err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !resp.Close {
			t.Errorf("%q: answered %d without Connection: close", strings.SplitN(req, "\r\n", 2)[0], resp.StatusCode)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%q: the connection stays open after the answer (%v)", strings.SplitN(req, "\r\n", 2)[0], err)
		}
	}
}
