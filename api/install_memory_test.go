package api_test

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestInstall_AnonymousDownloadsHoldBoundedMemory: a ready host release's
// binary is served to anyone who names its digest (/install.sh prints
// it). Each download held its chunk's buffer (store.ChunkSize, 1 MiB) in
// the controller's heap for as long as its client was slow — up to
// BlobWriteIdle (30 s) per write with nothing read, and a client that asks
// again every 29 s holds it throughout. So the memory outsiders hold is
// 1 MiB times their connections, bounded only by the connection cap (the
// open-file limit less 64: 19,936 here).
// Measured against the real binary over TLS: 2,000 such clients took the
// controller from 46 MB to 3 GB of RSS in 20 s (heap profile: 87% in
// blobReader.load), and a host's change took 14.8 s to arrive instead of
// 60 ms. Every download is served from one copy of the binary: none is
// refused (a bound on downloads at once let 16 addresses shut every
// install out), and none holds memory of its own.
func TestInstall_AnonymousDownloadsHoldBoundedMemory(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	binary := make([]byte, 16<<20) // more than the kernel's send buffer takes at once
	_, _ = rand.Read(binary)
	if resp, b := e.UploadRelease(e.Admin, "1.0.0", binary); resp.StatusCode != 201 {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	sum := sha256.Sum256(binary)
	path := "/install/mesh-host/sha256:" + hex.EncodeToString(sum[:])

	before := heapAlloc()
	const clients = 48
	served := 0
	for range clients {
		// A small receive window, as a client far away has; then nothing
		// read past the status line.
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
				_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1400)
			})
		}}
		conn, err := d.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
		if err != nil {
			t.Fatalf("download %d: no status line: %v", served, err)
		}
		if strings.Contains(line, " 200 ") {
			served++
		}
	}
	held := heapAlloc() - before
	t.Logf("%d anonymous downloads asked, %d served at once: heap grew %d MiB", clients, served, held>>20)
	// One copy of the 16 MiB binary is kept for every download.
	if served != clients || held > 24<<20 {
		t.Fatalf("%d anonymous, unread downloads of a host release (%d served) hold %d MiB of the controller's heap: outsiders' memory grows with their connections", clients, served, held>>20)
	}
}

// heapAlloc is the bytes the heap holds after a collection.
func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
