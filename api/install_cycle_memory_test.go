package api_test

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestInstall_CyclingDigestsHoldBoundedMemory: any ready host release's
// digest may be downloaded anonymously (models.IsInstallable), and a fleet
// with a history of releases has more of them ready than installBlobs
// kept (four). An outsider who asked for five ready digests in turn
// missed the cache on every request: each download read the whole binary
// from the store into a copy of its own, and a client that read nothing
// kept that copy alive — a whole binary a connection. Only the binaries
// the script offers are kept, and the others are served from the store a
// few at once.
func TestInstall_CyclingDigestsHoldBoundedMemory(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	const size = 8 << 20
	var paths []string
	for i := range 5 {
		binary := make([]byte, size)
		_, _ = rand.Read(binary)
		if resp, b := e.UploadRelease(e.Admin, fmt.Sprintf("1.0.%d", i), binary); resp.StatusCode != http.StatusCreated {
			t.Fatalf("release: %d %s", resp.StatusCode, b)
		}
		sum := sha256.Sum256(binary)
		paths = append(paths, "/install/mesh-host/sha256:"+hex.EncodeToString(sum[:]))
	}
	before := heapAlloc()
	const clients = 40
	served := 0
	for i := range clients {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 3, byte(i%8+2))}, Control: func(_, _ string, c syscall.RawConn) error {
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
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", paths[i%len(paths)])
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
		if err != nil {
			t.Fatalf("download %d: no status line: %v", i, err)
		}
		if strings.Contains(line, " 200 ") {
			served++
		}
	}
	held := heapAlloc() - before
	t.Logf("%d unread downloads of %d ready releases (%d served): heap grew %d MiB", clients, len(paths), served, held>>20)
	// One copy of each of the five binaries would be 40 MiB.
	if held > 6*size {
		t.Fatalf("%d anonymous, unread downloads cycling %d ready releases' digests (%d served) hold %d MiB of the controller's heap, a whole %d MiB binary a connection: outsiders' memory grows with their connections", clients, len(paths), served, held>>20, size>>20)
	}
}
