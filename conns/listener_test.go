package conns

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// MustServe serves a small API (/, /healthz, /readyz) on a listener capped
// by Limit(limit, reserve), with ServerTimeouts, until the test ends.
func MustServe(tb testing.TB, limit, reserve int, tune ...func(*http.Server, *Listener)) (*Listener, string) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	l := Limit(ln, limit, reserve)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ready") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	srv := &http.Server{Handler: mux}
	ServerTimeouts(srv)
	for _, f := range tune {
		f(srv, l)
	}
	go func() { _ = srv.Serve(l) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return l, ln.Addr().String()
}

// WaitFor waits until cond holds, failing the test after 5 s.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited 5s for %s", what)
		}
		<-tick.C
	}
}

// WaitOpen waits until l holds n connections.
func WaitOpen(tb testing.TB, l *Listener, n int) {
	tb.Helper()
	WaitFor(tb, fmt.Sprintf("%d open connections", n), func() bool { return l.Open() == n })
}

// MustDial opens a connection that fails its reads and writes after 5 s, so
// a test never hangs on one; it is closed when the test ends.
func MustDial(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Get sends GET path on c and reads the answer, body and all.
func Get(tb testing.TB, c net.Conn, path string, keepAlive bool) (*http.Response, string) {
	tb.Helper()
	conn := "close"
	if keepAlive {
		conn = "keep-alive"
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: mesh\r\nConnection: %s\r\n\r\n", path, conn); err != nil {
		tb.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: body: %v", path, err)
	}
	return resp, string(b)
}

// MustRefuse checks resp is the limiter's 503.
func MustRefuse(tb testing.TB, resp *http.Response, body string) {
	tb.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable {
		tb.Fatalf("status %d, want 503 (body %q)", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Retry-After"); got != "5" {
		tb.Errorf("Retry-After %q, want 5", got)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/problem+json" {
		tb.Errorf("Content-Type %q", got)
	}
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		tb.Fatalf("body %q: %v", body, err)
	}
	if p.Type != "about:blank" || p.Title != "Service Unavailable" || p.Status != 503 || !strings.HasPrefix(p.Detail, "too many connections: ") {
		tb.Errorf("problem %+v", p)
	}
}

func TestLimit_Flood(t *testing.T) {
	l, addr := MustServe(t, 20, 5)
	var flood []net.Conn
	for range 15 {
		flood = append(flood, MustDial(t, addr))
	}
	WaitOpen(t, l, 15)

	t.Run("RequestPastSoftCapRefused", func(t *testing.T) {
		resp, body := Get(t, MustDial(t, addr), "/api/v1/machines", false)
		MustRefuse(t, resp, body)
		if l.Refused() != 1 {
			t.Errorf("refused %d, want 1", l.Refused())
		}
		WaitOpen(t, l, 15)
	})
	t.Run("ProbesUseReserve", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/healthz?verbose=1"} {
			resp, body := Get(t, MustDial(t, addr), path, false)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s: %d %q, want 200", path, resp.StatusCode, body)
			}
			WaitOpen(t, l, 15)
		}
		if l.Reserved() != 3 {
			t.Errorf("reserved %d, want 3", l.Reserved())
		}
	})
	t.Run("ProbePastMaxRefused", func(t *testing.T) {
		for range 5 { // the probes keep their connections: the reserve is full
			c := MustDial(t, addr)
			if resp, _ := Get(t, c, "/healthz", true); resp.StatusCode != http.StatusOK {
				t.Fatalf("probe within the reserve: %d", resp.StatusCode)
			}
			flood = append(flood, c)
		}
		WaitOpen(t, l, 20)
		before := l.Refused()
		resp, body := Get(t, MustDial(t, addr), "/healthz", false)
		MustRefuse(t, resp, body)
		if l.Refused() != before+1 {
			t.Errorf("refused %d, want %d", l.Refused(), before+1)
		}
	})
	t.Run("CountReturnsToBaseline", func(t *testing.T) {
		for _, c := range flood {
			_ = c.Close()
		}
		WaitOpen(t, l, 0)
		if resp, body := Get(t, MustDial(t, addr), "/", false); resp.StatusCode != http.StatusOK || body != "hello" {
			t.Errorf("after the flood: %d %q", resp.StatusCode, body)
		}
	})
}

// A connection past the soft cap that sends nothing is refused once the
// peek times out: silence cannot hold the reserve.
func TestLimit_SilentPastSoftCapRefused(t *testing.T) {
	l, addr := MustServe(t, 4, 2, func(_ *http.Server, l *Listener) { l.peekTimeout = 50 * time.Millisecond })
	for range 2 {
		MustDial(t, addr)
	}
	WaitOpen(t, l, 2)
	resp, err := http.ReadResponse(bufio.NewReader(MustDial(t, addr)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	MustRefuse(t, resp, string(b))
	WaitOpen(t, l, 2)
}

// Under TLS the path cannot be read, so the reserve goes to any TLS
// connection (see Listener).
func TestLimit_TLSUsesReserve(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	l := Limit(ts.Listener, 4, 2)
	ts.Listener = l
	ts.StartTLS()
	defer ts.Close()
	for range 2 {
		MustDial(t, ts.Listener.Addr().String())
	}
	WaitOpen(t, l, 2)
	client := ts.Client()
	client.Transport.(*http.Transport).DisableKeepAlives = true
	resp, err := client.Get(ts.URL + "/api/v1/machines")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "hello" {
		t.Errorf("TLS past the soft cap: %d %q, want 200", resp.StatusCode, b)
	}
	if l.Reserved() != 1 {
		t.Errorf("reserved %d, want 1", l.Reserved())
	}
}

func TestConn_CloseTwiceCountsOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Limit(ln, 2, 1)
	defer l.Close()
	for _, name := range []string{"UnderSoftCap", "PastSoftCap"} {
		MustDial(t, ln.Addr().String())
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if l.Open() != 1 {
			t.Fatalf("%s: open %d, want 1", name, l.Open())
		}
		_ = c.Close()
		_ = c.Close()
		if l.Open() != 0 {
			t.Fatalf("%s: open %d after closing twice, want 0", name, l.Open())
		}
	}
}

func TestIsProbe(t *testing.T) {
	for line, want := range map[string]bool{
		"GET /healthz HTTP/1.1":  true,
		"GET /readyz HTTP/1.1":   true,
		"GET /healthz?x=1 HTTP":  true,
		"GET /readyz?x HTTP/1":   true,
		"GET /healthzz HTTP/1":   false,
		"GET /readyz/x HTTP/1":   false,
		"HEAD /healthz HTTP/1":   false,
		"POST /healthz HTTP/1":   false,
		"GET / HTTP/1.1\r\n\r\n": false,
	} {
		if got := isProbe([]byte(line)[:min(len(line), probePeek)]); got != want {
			t.Errorf("isProbe(%q) = %v, want %v", line, got, want)
		}
	}
}

// trackIdle has the listener follow the server's connections and lets an
// idle one make room after idleFor.
func trackIdle(idleFor time.Duration) func(*http.Server, *Listener) {
	return func(srv *http.Server, l *Listener) {
		l.evictAfter = idleFor
		l.Track(srv)
	}
}

// mustBeClosed waits until the server has closed c (its read ends).
func mustBeClosed(tb testing.TB, c net.Conn) {
	tb.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		tb.Fatalf("read %d bytes, %v: the connection is open", n, err)
	}
}

// Connections kept alive between requests, or that never sent one, do not
// hold the cap against a client with a request: the one idle longest makes
// room. Before, four such connections refused every other client until
// they were closed.
func TestLimit_IdleConnectionsMakeRoom(t *testing.T) {
	l, addr := MustServe(t, 6, 2, trackIdle(0))
	var idle []net.Conn
	for range 3 { // kept alive after a request
		c := MustDial(t, addr)
		if resp, body := Get(t, c, "/", true); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		idle = append(idle, c)
	}
	idle = append(idle, MustDial(t, addr)) // silent
	WaitOpen(t, l, 4)

	for i := range 4 {
		// Kept alive too: each newcomer holds its slot.
		resp, body := Get(t, MustDial(t, addr), "/", true)
		if resp.StatusCode != http.StatusOK || body != "hello" {
			t.Fatalf("request %d past the soft cap: %d %q, want hello", i, resp.StatusCode, body)
		}
	}
	for _, c := range idle { // the four idle longest, not the newcomers
		mustBeClosed(t, c)
	}
	if l.Evicted() != 4 || l.Refused() != 0 {
		t.Errorf("evicted %d, refused %d; want 4, 0", l.Evicted(), l.Refused())
	}
}

// A request in progress and a connection taken over (a parked poll) are
// never cut to make room: past the cap they hold, the newcomer is refused.
func TestLimit_BusyConnectionsHold(t *testing.T) {
	release := make(chan struct{})
	var held sync.WaitGroup
	l, addr := MustServe(t, 6, 2, trackIdle(0), func(srv *http.Server, _ *Listener) {
		mux := srv.Handler.(*http.ServeMux)
		mux.HandleFunc("GET /wait", func(w http.ResponseWriter, r *http.Request) {
			held.Done()
			<-release
		})
		mux.HandleFunc("GET /park", func(w http.ResponseWriter, r *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			held.Done()
			<-release
			_ = c.Close()
		})
	})
	defer close(release)
	held.Add(4)
	for _, path := range []string{"/wait", "/wait", "/park", "/park"} {
		fmt.Fprintf(MustDial(t, addr), "GET %s HTTP/1.1\r\nHost: mesh\r\n\r\n", path)
	}
	held.Wait()
	resp, body := Get(t, MustDial(t, addr), "/", false)
	MustRefuse(t, resp, body)
	if l.Evicted() != 0 {
		t.Errorf("evicted %d, want 0", l.Evicted())
	}
}

// A connection waiting for its first request keeps its place until it
// has waited the eviction age: the host that just connected is about to
// send its request.
func TestLimit_FreshConnectionsHoldForAWhile(t *testing.T) {
	l, addr := MustServe(t, 6, 2, trackIdle(time.Hour))
	for range 4 {
		MustDial(t, addr) // silent
	}
	WaitOpen(t, l, 4)
	resp, body := Get(t, MustDial(t, addr), "/", false)
	MustRefuse(t, resp, body)
	if l.Evicted() != 0 {
		t.Errorf("evicted %d, want 0", l.Evicted())
	}
}

// A connection on which a request proved a credential (Known) never makes
// room, however long it idles: an outsider's newcomers do not take the
// connections hosts and people already have.
func TestLimit_KnownConnectionsHold(t *testing.T) {
	l, addr := MustServe(t, 6, 2, trackIdle(0), func(srv *http.Server, _ *Listener) {
		srv.Handler.(*http.ServeMux).HandleFunc("GET /known", func(w http.ResponseWriter, r *http.Request) {
			Known(r, "person", r.URL.Query().Get("who"))
			io.WriteString(w, "known")
		})
	})
	var known []net.Conn
	for range 4 {
		c := MustDial(t, addr)
		if resp, body := Get(t, c, fmt.Sprintf("/known?who=p%d", len(known)), true); resp.StatusCode != http.StatusOK || body != "known" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		known = append(known, c)
	}
	WaitOpen(t, l, 4)
	resp, body := Get(t, MustDial(t, addr), "/", false)
	MustRefuse(t, resp, body)
	if l.Evicted() != 0 {
		t.Errorf("evicted %d, want 0", l.Evicted())
	}
	for _, c := range known { // each still serves its client
		if resp, body := Get(t, c, "/", true); resp.StatusCode != http.StatusOK || body != "hello" {
			t.Errorf("a known connection after the newcomer: %d %q", resp.StatusCode, body)
		}
	}
}

// Under TLS the listener finds its connection beneath the server's TLS
// one: TLS connections kept alive make room as plain ones do, and the one
// closed gets no close_notify (its transport is closed).
func TestLimit_IdleTLSConnectionsMakeRoom(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	l := Limit(ts.Listener, 4, 1) // room for 3 before the cap
	l.evictAfter = 0
	l.Track(ts.Config)
	ts.Listener = l
	ts.StartTLS()
	defer ts.Close()
	get := func(client *http.Client) string {
		resp, err := client.Get(ts.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	var clients []*http.Client
	for range 3 { // one a client: each keeps its own connection
		c := &http.Client{Transport: ts.Client().Transport.(*http.Transport).Clone()}
		if got := get(c); got != "200 hello" {
			t.Fatal(got)
		}
		clients = append(clients, c)
	}
	WaitOpen(t, l, 3)
	fresh := &http.Client{Transport: ts.Client().Transport.(*http.Transport).Clone()}
	if got := get(fresh); got != "200 hello" {
		t.Fatalf("TLS past the cap: %s, want 200 hello", got)
	}
	if l.Evicted() != 1 {
		t.Errorf("evicted %d, want 1", l.Evicted())
	}
	// The client whose connection was closed connects again.
	for _, c := range clients {
		if got := get(c); got != "200 hello" {
			t.Errorf("a client after the eviction: %s", got)
		}
	}
}

// A body read before any credential is checked (IdleUntilRead) does not
// hold its slot while it trickles in; once read, its request is in use
// again and holds. Before, a trickled body held its slot for the whole
// body deadline.
func TestLimit_TrickledAnonymousBodyMakesRoom(t *testing.T) {
	read := make(chan struct{}, 4)
	release := make(chan struct{})
	defer close(release)
	l, addr := MustServe(t, 4, 1, trackIdle(0), func(srv *http.Server, _ *Listener) {
		srv.Handler.(*http.ServeMux).HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
			defer IdleUntilRead(r)()
			if _, err := io.ReadAll(r.Body); err != nil {
				return
			}
			read <- struct{}{}
			<-release // read, then busy: it holds
		})
	})
	trickle := func(whole bool) net.Conn {
		c := MustDial(t, addr)
		body := "user=a"
		if !whole {
			body = "us" // of the 6 announced
		}
		fmt.Fprintf(c, "POST /login HTTP/1.1\r\nHost: mesh\r\nContent-Length: 6\r\n\r\n%s", body)
		return c
	}
	trickled := trickle(false)
	for range 2 {
		trickle(true)
		<-read
	}
	WaitOpen(t, l, 3)
	// The soft cap (3) is held: the trickler makes room, the two whose
	// bodies were read do not.
	WaitFor(t, "the trickled body counted idle", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.idle.Len() == 1
	})
	if resp, body := Get(t, MustDial(t, addr), "/", true); resp.StatusCode != http.StatusOK {
		t.Fatalf("past the soft cap with a trickled body in it: %d %q", resp.StatusCode, body)
	}
	mustBeClosed(t, trickled)
	if l.Evicted() != 1 {
		t.Errorf("evicted %d, want 1", l.Evicted())
	}
}

// A client that asks for an answer and reads none holds no slot past the
// cap while the answer waits for it: a write that waits on its client
// counts the connection idle. Before, it held its slot for the write's
// whole deadline (or for good, with none).
func TestLimit_UnreadAnswerMakesRoom(t *testing.T) {
	big := strings.Repeat("x", 8<<20)
	writing := make(chan struct{}, 1)
	l, addr := MustServe(t, 4, 1, trackIdle(0), func(srv *http.Server, _ *Listener) {
		srv.Handler.(*http.ServeMux).HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
			writing <- struct{}{}
			io.WriteString(w, big)
		})
	})
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	stalled, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "GET /big HTTP/1.1\r\nHost: mesh\r\n\r\n")
	<-writing
	WaitFor(t, "the unread answer's write waiting on its client", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.idle.Len() == 1
	})
	for range 2 { // kept alive: with the stalled one, the soft cap
		c := MustDial(t, addr)
		if resp, _ := Get(t, c, "/", true); resp.StatusCode != http.StatusOK {
			t.Fatal(resp.Status)
		}
	}
	if resp, body := Get(t, MustDial(t, addr), "/", false); resp.StatusCode != http.StatusOK {
		t.Fatalf("past the soft cap with an unread answer in it: %d %q", resp.StatusCode, body)
	}
	_ = stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := io.Copy(io.Discard, stalled)
	if n >= int64(len(big)) {
		t.Errorf("the stalled client read the whole answer (%d bytes): its connection was not the one closed", n)
	}
	if l.Evicted() == 0 {
		t.Errorf("evicted 0")
	}
}

// One principal's connections are known KnownPer at a time: past that,
// more of its connections make room as unknown ones do, so one copied host
// token or one viewer's token cannot pin every slot.
func TestLimit_KnownPerPrincipal(t *testing.T) {
	l, addr := MustServe(t, KnownPer+4, 2, trackIdle(0), func(srv *http.Server, _ *Listener) {
		srv.Handler.(*http.ServeMux).HandleFunc("GET /known", func(w http.ResponseWriter, r *http.Request) {
			Known(r, "machine", "m1")
			io.WriteString(w, "known")
		})
	})
	for range KnownPer + 2 { // the soft cap, all one machine's
		if resp, body := Get(t, MustDial(t, addr), "/known", true); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	WaitOpen(t, l, KnownPer+2)
	if resp, body := Get(t, MustDial(t, addr), "/", false); resp.StatusCode != http.StatusOK {
		t.Fatalf("past the soft cap, all of it one principal's: %d %q", resp.StatusCode, body)
	}
	if l.Evicted() != 1 {
		t.Errorf("evicted %d, want 1", l.Evicted())
	}
	l.mu.Lock()
	n := l.knownBy["machine:m1"]
	l.mu.Unlock()
	if n != KnownPer {
		t.Errorf("known of machine:m1: %d, want %d", n, KnownPer)
	}
}
