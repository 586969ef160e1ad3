package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/testwait"
)

// keptPoll is one poll on a client of its own, and whether it went out on
// a connection an earlier answer left open.
type keptPoll struct {
	status int
	reused bool
	local  string
	closed bool // the answer said Connection: close
	body   string
	etag   string
	send   string // X-Mesh-Send
}

func pollOn(t *testing.T, hc *http.Client, e *ctltest.Env, token string, known int64, wait string, closeAfter bool) keptPoll {
	t.Helper()
	var kp keptPoll
	trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		kp.reused, kp.local = ci.Reused, ci.Conn.LocalAddr().String()
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET",
		e.URL+"/api/v1/host/declaration?wait="+wait, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("X-Mesh-Host-Version", "1.0.0")
	req.Header.Set("X-Mesh-Schema", "1")
	req.Header.Set("If-None-Match", fmt.Sprintf(`"%d"`, known))
	req.Close = closeAfter
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	kp.status, kp.closed, kp.body = resp.StatusCode, resp.Close, string(b)
	kp.etag, kp.send = resp.Header.Get("ETag"), resp.Header.Get("X-Mesh-Send")
	return kp
}

// TestParkedPoll_KeepsItsConnection: a parked poll's answer, a 304 at its
// deadline or a 200 on a change, leaves the connection open and the host's
// next poll is served on it — no new connection (and over TLS no
// handshake) per answer. A host that asks to close gets Connection: close.
func TestParkedPoll_KeepsItsConnection(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	en := e.Enroll("m1")
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	t.Cleanup(hc.CloseIdleConnections)

	first := pollOn(t, hc, e, en.Token, 0, "0s", false)
	if first.status != 200 {
		t.Fatalf("first poll: %d", first.status)
	}
	// Parked, then answered 304 by its deadline.
	p := pollOn(t, hc, e, en.Token, 1, "1100ms", false)
	if p.status != 304 || p.closed {
		t.Fatalf("parked poll: %d, closed %v", p.status, p.closed)
	}
	next := pollOn(t, hc, e, en.Token, 1, "0s", false)
	if !next.reused || next.local != p.local {
		t.Fatalf("the poll after a parked 304 went out on a new connection (%s, was %s)", next.local, p.local)
	}

	// Parked, then answered 200 by a change.
	done := make(chan keptPoll, 1)
	go func() { done <- pollOn(t, hc, e, en.Token, 1, "30s", false) }()
	testwait.For(t, 10*time.Second, "the poll parked", func() bool { return e.Ctl.Hub.ParkedOn("m1") })
	firstVariables(e, "m1")
	var woken keptPoll
	select {
	case woken = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the parked poll was not answered")
	}
	if woken.status != 200 || woken.closed {
		t.Fatalf("woken parked poll: %d, closed %v", woken.status, woken.closed)
	}
	after := pollOn(t, hc, e, en.Token, 2, "0s", false)
	if !after.reused || after.local != woken.local {
		t.Fatalf("the poll after a parked 200 went out on a new connection (%s, was %s)", after.local, woken.local)
	}

	// A host that asks to close gets it.
	c := pollOn(t, hc, e, en.Token, 2, "1100ms", true)
	if c.status != 304 || !c.closed {
		t.Fatalf("a poll asking to close: %d, closed %v", c.status, c.closed)
	}
	if again := pollOn(t, hc, e, en.Token, 2, "0s", false); again.reused {
		t.Fatal("a connection the host asked to close was used again")
	}
}
