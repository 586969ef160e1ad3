package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/store"
)

// An outsider who holds every connection a controller allows, kept alive
// and idle or trickling a login's body, does not keep hosts out: past the cap the connection idle
// longest makes room (conns.Listener). Before, no new host could enrol and
// no host connect again until the outsider let go.
func TestConnectionCap_IdleHoldersDoNotKeepHostsOut(t *testing.T) {
	c := startController(t, store.SQLite, "--max-conns", "40")
	c.module("conf")
	c.upload("conf", `{"resources": []}`, nil)
	addr := strings.TrimPrefix(c.URL, "http://")
	hold := func(path string) bool {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: mesh\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode != http.StatusServiceUnavailable
	}
	// The soft cap (40 less the 16 of the probes' reserve, less the test's
	// own connections) held by unauthenticated requests kept alive, the
	// reserve by probes.
	held := 0
	for range 8 { // logins whose bodies trickle: nothing is answered yet
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "POST /api/v1/auth/login HTTP/1.1\r\nHost: mesh\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"user")
		held++
	}
	for held < 40 && hold("/api/v1/host/ca") {
		held++
	}
	for held < 80 && hold("/healthz") {
		held++
	}
	if held < 30 {
		t.Fatalf("held %d connections, want the cap's 40 less the test's own", held)
	}
	// The room comes once those have been idle for conns.EvictAfter.
	enrolWhileHeld(t, c)

	resp, err := http.Get(c.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^mesh_connections_evicted_total (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics has no mesh_connections_evicted_total:\n%.2000s", b)
	}
	if n, _ := strconv.Atoi(string(m[1])); n == 0 {
		t.Errorf("mesh_connections_evicted_total 0: the host got in some other way")
	}
}

// Dashboard forms are read for their CSRF token before the session is
// checked: an outsider trickling such bodies does not hold the cap either.
// Before, the soft cap held by trickled form posts refused every newcomer
// for the whole body deadline.
func TestConnectionCap_TrickledFormsDoNotKeepHostsOut(t *testing.T) {
	c := startController(t, store.SQLite, "--max-conns", "40")
	c.module("conf")
	c.upload("conf", `{"resources": []}`, nil)
	addr := strings.TrimPrefix(c.URL, "http://")
	for range 40 { // the soft cap and past it: those past it make room among themselves
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "POST /logout HTTP/1.1\r\nHost: mesh\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n_csrf=")
	}
	enrolWhileHeld(t, c)
}

// enrolWhileHeld waits until a new connection is served while the cap is
// held, then enrols a host, which applies the module conf it is assigned.
func enrolWhileHeld(t *testing.T, c *controllerProc) {
	t.Helper()
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	waitFor(t, 20*time.Second, "a new connection served while the cap is held", func() bool {
		resp, err := fresh.Get(c.URL + "/api/v1/host/ca")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode != http.StatusServiceUnavailable
	})
	h := enroll(t, c, "m1", c.URL)
	h.start()
	c.assign("m1", "conf")
	c.waitApplied("m1", 30*time.Second)
}
