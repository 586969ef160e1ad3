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

// TestInstall_FewAddressesDoNotShutEveryInstallOut: a bound on anonymous
// downloads at once (64 in all, 4 an address) was taken by an outsider
// from 16 addresses (a /64 of IPv6 has many more), each asking for the
// public binary 4 times and reading nothing: every machine of the fleet
// then got 503 for the binary. Downloads are served from one copy in
// memory and none is refused.
func TestInstall_FewAddressesDoNotShutEveryInstallOut(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	binary := make([]byte, 16<<20)
	_, _ = rand.Read(binary)
	if resp, b := e.UploadRelease(e.Admin, "1.0.0", binary); resp.StatusCode != http.StatusCreated {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	sum := sha256.Sum256(binary)
	path := "/install/mesh-host/sha256:" + hex.EncodeToString(sum[:])
	target := strings.TrimPrefix(e.URL, "http://")

	const addresses, each = 16, 4
	held := 0
	for a := range addresses {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(a+2))}
		for range each {
			d := net.Dialer{LocalAddr: local, Control: func(_, _ string, c syscall.RawConn) error {
				return c.Control(func(fd uintptr) {
					_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024)
				})
			}}
			conn, err := d.Dial("tcp", target)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReaderSize(conn, 16).ReadString('\n')
			if err != nil {
				t.Fatalf("no status line: %v", err)
			}
			if strings.Contains(line, " 200 ") {
				held++
			}
		}
	}
	t.Logf("the outsider holds %d downloads from %d addresses", held, addresses)

	// A machine of the fleet, from an address of its own, runs install.sh.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 2, 200)}}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 30 * time.Second}
	resp, err := client.Get(e.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a machine installing from an address of its own got %d (Retry-After %q) for the binary while an outsider's %d unread downloads from %d addresses held the bound: no machine installs",
			resp.StatusCode, resp.Header.Get("Retry-After"), held, addresses)
	}
}
