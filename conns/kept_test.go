package conns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"mesh/testwait"
)

// TestKept: a connection given back is accepted; after Close nothing is
// taken (the caller closes it), Accept ends, and what was queued is closed.
func TestKept(t *testing.T) {
	k := NewKept(&net.TCPAddr{}, 1)
	a, b := net.Pipe()
	defer b.Close()
	if !k.Give(a) {
		t.Fatal("Give refused a connection with room queued")
	}
	if got, err := k.Accept(); err != nil || got != a {
		t.Fatalf("Accept: %v, %v", got, err)
	}
	c, d := net.Pipe()
	defer d.Close()
	if !k.Give(c) {
		t.Fatal("Give refused a connection with room queued")
	}
	e, f := net.Pipe()
	defer e.Close()
	defer f.Close()
	if k.Give(e) {
		t.Fatal("Give took a connection past the queue's size")
	}
	_ = k.Close()
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("a queued connection was left open by Close")
	}
	if k.Give(e) {
		t.Fatal("Give took a connection after Close")
	}
	if _, err := k.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// acceptor is what k's Accept returns, one connection after another,
// until it fails.
func acceptor(k *Kept) <-chan net.Conn {
	got := make(chan net.Conn, 8)
	go func() {
		defer close(got)
		for {
			c, err := k.Accept()
			if err != nil {
				return
			}
			got <- c
		}
	}()
	return got
}

// accepted is the next connection from got within d, or nil.
func accepted(got <-chan net.Conn, d time.Duration) net.Conn {
	select {
	case c := <-got:
		return c
	case <-time.After(d):
		return nil
	}
}

// TestKept_WaitsForTheNextRequest: a connection given back reaches the
// server only once its peer sends, with nothing of what was sent taken,
// and with no deadline left on it (a stale one of the server's cleared); one whose peer sends nothing is closed
// after the idle time, one whose peer closes is closed without reaching
// the server, and Close closes those still waiting.
func TestKept_WaitsForTheNextRequest(t *testing.T) {
	k := NewKept(&net.TCPAddr{}, 4)
	k.idle = 500 * time.Millisecond
	got := acceptor(k)
	srv, cl := tcpPair(t)
	// A hijacked connection comes with the server's deadlines on it,
	// long past by the time its host asks again.
	_ = srv.SetReadDeadline(time.Now().Add(-time.Second))
	if !k.Give(srv) {
		t.Fatal("Give refused a connection")
	}
	if c := accepted(got, 300*time.Millisecond); c != nil {
		t.Fatal("a connection reached the server before its next request")
	}
	if _, err := cl.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c := accepted(got, 5*time.Second)
	if c != srv {
		t.Fatalf("after the request: accepted %v", c)
	}
	// No deadline is left on it for the server to trip over.
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}

	idle, idleCl := tcpPair(t)
	k.Give(idle)
	_ = idleCl.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idleCl.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle connection past the idle time: read %v, want it closed", err)
	}

	// A connection whose host closes is closed at once, long before its
	// idle time, without reaching the server: its own reads then fail as
	// reads of a closed connection, not with the host's end of file.
	k.idle = time.Minute
	gone, goneCl := tcpPair(t)
	k.Give(gone)
	goneCl.Close()
	testwait.For(t, 5*time.Second, "the connection its host closed closed", func() bool {
		_, err := gone.Read(buf)
		return errors.Is(err, net.ErrClosed)
	})
	if c := accepted(got, 100*time.Millisecond); c != nil {
		t.Fatal("a connection its peer closed reached the server")
	}

	waiting, waitingCl := tcpPair(t)
	k.Give(waiting)
	_ = k.Close()
	_ = waitingCl.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := waitingCl.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("a waiting connection after Close: read %v, want it closed", err)
	}
}

// TestKept_GivenBackAgain: a connection served and given back again waits
// for its next request again, and many waiting at once (more than one
// epoll wait returns) each reach the server on their own request, holding
// no goroutine each while they wait.
func TestKept_GivenBackAgain(t *testing.T) {
	k := NewKept(&net.TCPAddr{}, 512)
	defer k.Close()
	got := acceptor(k)
	srv, cl := tcpPair(t)
	buf := make([]byte, 64)
	for round := range 3 {
		if !k.Give(srv) {
			t.Fatalf("round %d: Give refused a connection", round)
		}
		if c := accepted(got, 100*time.Millisecond); c != nil {
			t.Fatalf("round %d: a connection reached the server before its next request", round)
		}
		if _, err := cl.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if c := accepted(got, 5*time.Second); c != srv {
			t.Fatalf("round %d: after the request: accepted %v", round, c)
		}
		if n, err := srv.Read(buf); err != nil || n != 18 {
			t.Fatalf("round %d: the server read %d bytes, %v", round, n, err)
		}
	}

	const many = 300
	servers, clients := make([]net.Conn, many), make([]net.Conn, many)
	for i := range many {
		servers[i], clients[i] = tcpPair(t)
	}
	before := runtime.NumGoroutine()
	for i := range many {
		if !k.Give(servers[i]) {
			t.Fatalf("Give refused connection %d", i)
		}
	}
	if after := runtime.NumGoroutine(); after-before > 10 {
		t.Fatalf("%d goroutines more with %d connections waiting", after-before, many)
	}
	for i := range many {
		if _, err := clients[i].Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[net.Conn]bool{}
	for len(seen) < many {
		c := accepted(got, 5*time.Second)
		if c == nil {
			t.Fatalf("%d of %d connections reached the server", len(seen), many)
		}
		seen[c] = true
	}
	for i := range many {
		if !seen[servers[i]] {
			t.Fatalf("connection %d did not reach the server", i)
		}
	}
}

// tlsPair is a connected pair of TLS connections over loopback TCP, the
// handshake done.
func tlsPair(t *testing.T) (server, client *tls.Conn) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"kept.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	rawSrv, rawCl := tcpPair(t)
	server = tls.Server(rawSrv, &tls.Config{Certificates: []tls.Certificate{cert}})
	client = tls.Client(rawCl, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a test's own pair
	errs := make(chan error, 1)
	go func() { errs <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return server, client
}

// TestKept_AStuckHostHoldsNoOneUp: closing a connection whose host
// stopped reading, with its socket's buffers full, does not hold up the
// others: over TLS a plain Close first writes close_notify, which waits
// up to 5 s for room, and done while the waiting connections' lock was
// held, every Give and every other host's request waited with it.
func TestKept_AStuckHostHoldsNoOneUp(t *testing.T) {
	k := NewKept(&net.TCPAddr{}, 8)
	defer k.Close()
	got := acceptor(k)

	stuck, _ := tlsPair(t)
	// Fill the buffers between the two (the host reads nothing).
	raw := stuck.NetConn()
	for _, size := range []int{64 << 10, 1 << 10, 8} {
		junk := make([]byte, size)
		for {
			_ = raw.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := raw.Write(junk); err != nil {
				break
			}
		}
	}
	_ = raw.SetWriteDeadline(time.Time{})
	k.idle = 100 * time.Millisecond
	if !k.Give(stuck) {
		t.Fatal("Give refused the stuck connection")
	}
	k.idle = time.Minute
	// Past its idle time the stuck one is closed on the next tick (0.5 s),
	// not after close_notify's 5 s: a read of its socket here ends then,
	// as a read of a closed connection.
	_ = raw.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the stuck connection 3 s after it was given back with 0.1 s to wait: read %v, want it closed", err)
	}
	srv, cl := tcpPair(t)
	start := time.Now()
	if !k.Give(srv) {
		t.Fatal("Give refused a connection")
	}
	if _, err := cl.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if c := accepted(got, 10*time.Second); c != srv {
		t.Fatalf("the other host's request: accepted %v", c)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the other host's request reached the server %v after it was sent, behind the stuck host's close", took)
	}
}

// TestKept_SharesItsSet: a watcher sharing the listener's epoll set
// (Share) is told of its own registrations' events — a watched
// connection whose host closed — and of nothing else. A connection it
// watched, then given back, is armed again in place of its registration:
// the host's next request reaches the server and wakes nothing for the
// watcher (in a set of the watcher's own, that request woke its goroutine
// too, for an event nothing claimed).
func TestKept_SharesItsSet(t *testing.T) {
	k := NewKept(&net.TCPAddr{}, 4)
	defer k.Close()
	var mu sync.Mutex
	heard := map[int32]int32{} // by descriptor: the last event's registration
	n := 0
	if !k.Share(func(fd, seq int32) {
		mu.Lock()
		defer mu.Unlock()
		heard[fd] = seq
		n++
	}) {
		t.Fatal("no epoll set to share")
	}
	got := acceptor(k)
	watch := func(c net.Conn) (fd, seq int32) {
		fd, ok := FD(c)
		if !ok {
			t.Fatal("a TCP connection has no descriptor")
		}
		seq = NextSeq()
		if err := k.Arm(fd, seq); err != nil {
			t.Fatal(err)
		}
		return fd, seq
	}
	hears := func(what string, fd, seq int32) {
		testwait.For(t, 5*time.Second, what, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return heard[fd] == seq
		})
	}

	left, leftHost := tcpPair(t)
	fd, seq := watch(left)
	leftHost.Close()
	hears("the watcher told its host left", fd, seq)

	srv, host := tcpPair(t)
	fd, _ = watch(srv)
	if !k.GiveFD(srv, fd) {
		t.Fatal("GiveFD refused a connection")
	}
	if _, err := host.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if c := accepted(got, 5*time.Second); c != srv {
		t.Fatalf("after the request: accepted %v", c)
	}
	// A marker after it: once the watcher hears the marker, it has heard
	// whatever the request woke for it.
	marker, markerHost := tcpPair(t)
	mfd, mseq := watch(marker)
	markerHost.Close()
	hears("the watcher told the marker's host left", mfd, mseq)
	mu.Lock()
	heardAll := n
	mu.Unlock()
	if heardAll != 2 {
		t.Fatalf("the watcher heard %d events, want 2 (the two hosts that left): the request woke it too", heardAll)
	}

	// Once the listener is closed its set is too (its number soon another
	// file's): nothing more is armed there.
	_ = k.Close()
	later, _ := tcpPair(t)
	lfd, _ := FD(later)
	if err := k.Arm(lfd, NextSeq()); err == nil {
		t.Fatal("armed in the set of a closed listener")
	}
}
