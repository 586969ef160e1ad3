package api_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
)

// rawPoll opens a connection and sends one long poll on it, leaving the
// connection open; it returns the connection and a reader of its answer.
func rawPoll(t *testing.T, e *ctltest.Env, token string, known int64, wait string) (net.Conn, *bufio.Reader) {
	t.Helper()
	var c net.Conn
	var err error
	if addr, ok := strings.CutPrefix(e.URL, "https://"); ok {
		c, err = tls.Dial("tcp", addr, meshca.ClientConfig(e.Ctl.CA.Cert))
	} else {
		c, err = net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	}
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /api/v1/host/declaration?wait=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nIf-None-Match: \"%d\"\r\nX-Mesh-Schema: 1\r\nX-Mesh-Host-Version: 1.0.0\r\n\r\n", wait, token, known)
	return c, bufio.NewReader(c)
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestPolls_OnePerMachine: a newer poll from the same machine answers the
// older (304) and takes its place. 2,000 polls with one token used to be
// parked side by side (there was no limit per machine), and 20,000 took
// the controller down.
func TestPolls_OnePerMachine(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	en := e.Enroll("m1")
	if p := doPoll(e, en.Token, 0, "1s"); p.status != 200 {
		t.Fatalf("first poll: %d", p.status)
	}
	first, r := rawPoll(t, e, en.Token, 1, "60s")
	defer first.Close()
	waitFor(t, 5*time.Second, func() bool { return e.Ctl.Hub.OpenPolls() == 1 })
	second, r2 := rawPoll(t, e, en.Token, 1, "60s")
	defer second.Close()
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusNotModified {
		t.Fatalf("the older poll: %v %v; want 304 at once", resp, err)
	}
	waitFor(t, 5*time.Second, func() bool { return e.Ctl.Hub.OpenPolls() == 1 })
	// The newer one still waits, and receives the next change.
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"x": "1"}}}, 200, nil)
	_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err = http.ReadResponse(r2, nil)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("ETag") != `"2"` {
		t.Fatalf("the newer poll after a change: %v %v", resp, err)
	}
}

// TestPolls_PeerClosedReleased: a parked poll whose host closed its end
// is released within seconds (it kept its descriptor until its wait ran
// out: 4.5 minutes after a flood's clients left).
func TestPolls_PeerClosedReleased(t *testing.T) {
	overPlainAndTLS(t, testPeerClosedReleased)
}

// overPlainAndTLS runs a test against a controller serving plain HTTP and
// one serving TLS (whose parked connections are looked at through the TLS
// connection, to the socket beneath).
func overPlainAndTLS(t *testing.T, f func(t *testing.T, e *ctltest.Env)) {
	t.Run("Plain", func(t *testing.T) { f(t, ctltest.Start(t, store.SQLite)) })
	t.Run("TLS", func(t *testing.T) {
		f(t, ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true}))
	})
}

func testPeerClosedReleased(t *testing.T, e *ctltest.Env) {
	en := e.Enroll("m1")
	if p := doPoll(e, en.Token, 0, "1s"); p.status != 200 {
		t.Fatalf("first poll: %d", p.status)
	}
	c, _ := rawPoll(t, e, en.Token, 1, "300s")
	waitFor(t, 5*time.Second, func() bool { return e.Ctl.Hub.OpenPolls() == 1 })
	c.Close()
	waitFor(t, 5*time.Second, func() bool { return e.Ctl.Hub.OpenPolls() == 0 })
}

// TestPolls_FloodOnOneToken: hundreds of connections polling with one
// machine's token leave one waiting poll; /healthz answers throughout;
// another machine's host receives its change; descriptors return to
// their baseline once the flood closes.
func TestPolls_FloodOnOneToken(t *testing.T) {
	overPlainAndTLS(t, testFloodOnOneToken)
}

func testFloodOnOneToken(t *testing.T, e *ctltest.Env) {
	attacker, victim := e.Enroll("m1"), e.Enroll("m2")
	for _, en := range []ctltest.Enrolled{attacker, victim} {
		if p := doPoll(e, en.Token, 0, "1s"); p.status != 200 {
			t.Fatalf("first poll: %d", p.status)
		}
	}
	baseline := openFDs(t)
	var conns []net.Conn
	for range 500 {
		c, _ := rawPoll(t, e, attacker.Token, 1, "300s")
		conns = append(conns, c)
	}
	waitFor(t, 20*time.Second, func() bool { return e.Ctl.Hub.OpenPolls() <= 1 })
	if resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/healthz"}); resp.StatusCode != 200 {
		t.Fatalf("/healthz during the flood: %d", resp.StatusCode)
	}
	var wg sync.WaitGroup
	var got poll
	wg.Add(1)
	go func() { defer wg.Done(); got = doPoll(e, victim.Token, 1, "30s") }()
	waitFor(t, 5*time.Second, func() bool { return e.Ctl.Hub.Polling("m2") })
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m2/variables", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"x": "1"}}}, 200, nil)
	wg.Wait()
	if got.status != 200 || got.etag != `"2"` {
		t.Fatalf("the other machine's change during the flood: %d %s", got.status, got.etag)
	}
	for _, c := range conns {
		c.Close()
	}
	// The test's own 500 client descriptors close here too; the
	// controller's (in this process) must follow.
	waitFor(t, 15*time.Second, func() bool { return openFDs(t) <= baseline+5 })
}
