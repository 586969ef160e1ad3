package api

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mesh/conns"
	"mesh/hub"
	"mesh/models"
)

// TestWriteAnswer_BoundedWhenTheHostDoesNotRead: an answer to a host that
// does not take it fails within its bound (and its connection is closed by
// the caller) instead of holding the goroutine that writes it — for a
// fan-out's claimed polls, the goroutine the rest of its chunk waits on.
// One that is read is written whole, and the connection's next write is
// not cut by the bound.
func TestWriteAnswer_BoundedWhenTheHostDoesNotRead(t *testing.T) {
	server, host := net.Pipe() // unbuffered: a write waits for its reader
	defer server.Close()
	defer host.Close()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- writeAnswer(server, []byte("HTTP/1.1 200 OK\r\n\r\n"), 50*time.Millisecond) }()
	cutWithinBound(t, done, start)

	server2, host2 := net.Pipe()
	defer server2.Close()
	defer host2.Close()
	go func() { done <- writeAnswer(server2, []byte("first"), 50*time.Millisecond) }()
	b := make([]byte, 5)
	if _, err := io.ReadFull(host2, b); err != nil || <-done != nil {
		t.Fatalf("an answer that is read: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // past the first answer's bound: it must not cut the next write
	go func() { _, err := server2.Write([]byte("next")); done <- err }()
	if _, err := io.ReadFull(host2, b[:4]); err != nil || <-done != nil {
		t.Fatalf("the connection's next write after an answer: %v", err)
	}
}

// tcpPair is a connected pair of loopback TCP connections, closed when
// the test ends.
func tcpPair(t *testing.T) (server, host net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	host, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); host.Close() })
	return server, host
}

// TestPeerWatch_ADonePollIsNotArmed: a poll answered before its park
// armed the watch is not armed after: its connection is closed once it is
// done, and its descriptor may by then name another host's connection,
// whose registration it would take over (that host's leaving would then
// end no poll).
func TestPeerWatch_ADonePollIsNotArmed(t *testing.T) {
	w, err := newPeerWatch(func(*parkedPoll) {}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(w.epfd)
	server, _ := tcpPair(t)
	pp := &parkedPoll{conn: server}
	if pp.fd, pp.hasFD = conns.FD(server); !pp.hasFD {
		t.Fatal("a TCP connection has no descriptor")
	}
	pp.state.Store(parkedDone)
	if w.arm(pp) {
		t.Fatal("a poll already done was armed")
	}
	if _, ok := w.byFD[pp.fd]; ok {
		t.Fatal("a poll already done holds its descriptor's registration")
	}
	pp.state.Store(parkedWaiting)
	if !w.arm(pp) || w.byFD[pp.fd].pp != pp {
		t.Fatal("a waiting poll was not armed")
	}
}

// TestPeerWatch_NotArmedOnceTheKeptListenerCloses: a watch sharing the
// kept listener's epoll set arms nothing there once the listener is
// closed (its set is closed with it, and the set's number may soon name
// another file): the poll is reported unwatched, so it is looked at
// before its answer instead.
func TestPeerWatch_NotArmedOnceTheKeptListenerCloses(t *testing.T) {
	k := conns.NewKept(&net.TCPAddr{}, 1)
	w, err := newPeerWatch(func(*parkedPoll) {}, k)
	if err != nil {
		t.Fatal(err)
	}
	if w.own() {
		t.Fatal("the watch did not share the kept listener's set")
	}
	server, _ := tcpPair(t)
	pp := &parkedPoll{conn: server}
	if pp.fd, pp.hasFD = conns.FD(server); !pp.hasFD {
		t.Fatal("a TCP connection has no descriptor")
	}
	if !w.arm(pp) {
		t.Fatal("a waiting poll was not armed")
	}
	_ = k.Close()
	if w.arm(pp) {
		t.Fatal("a poll was armed in the set of a closed listener")
	}
}

// TestWriteAnswer_OverTCP: over a real socket, a small answer goes
// straight to it whole (writeNow, no deadline); one larger than the
// socket takes at once is written in part straight to it and the rest
// under the bound: a host that reads gets every byte in order, and the
// connection's next answer goes through; a host that does not read holds
// the writer no longer than the bound.
func TestWriteAnswer_OverTCP(t *testing.T) {
	answer := make([]byte, 8<<20) // far past both ends' socket buffers
	for i := range answer {
		answer[i] = byte(i % 251)
	}

	server, host := tcpPair(t)
	rc, ok := conns.RawConn(server)
	if !ok {
		t.Fatal("a TCP connection has no raw connection")
	}
	if n, err := writeNow(rc, []byte("small")); n != 5 || err != nil {
		t.Fatalf("a small answer straight to the socket: %d bytes, %v", n, err)
	}
	got := make([]byte, len(answer))
	if _, err := io.ReadFull(host, got[:5]); err != nil || string(got[:5]) != "small" {
		t.Fatalf("the small answer read: %q, %v", got[:5], err)
	}
	done := make(chan error, 1)
	go func() { done <- writeAnswer(server, answer, 30*time.Second) }()
	if _, err := io.ReadFull(host, got); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("an answer that is read: %v", err)
	}
	for i := range got {
		if got[i] != answer[i] {
			t.Fatalf("byte %d of the answer: %d, want %d", i, got[i], answer[i])
		}
	}
	go func() { done <- writeAnswer(server, []byte("next"), 10*time.Millisecond) }()
	if _, err := io.ReadFull(host, got[:4]); err != nil || string(got[:4]) != "next" || <-done != nil {
		t.Fatalf("the connection's next answer: %q, %v", got[:4], err)
	}

	server, _ = tcpPair(t)
	rc, _ = conns.RawConn(server)
	if n, err := writeNow(rc, answer); n <= 0 || n >= len(answer) || err != nil {
		t.Fatalf("an answer larger than the socket takes, to a host not reading: %d of %d bytes at once, %v; want a part", n, len(answer), err)
	}
	start := time.Now()
	go func() { done <- writeAnswer(server, answer, 50*time.Millisecond) }()
	cutWithinBound(t, done, start)
}

// cutWithinBound: the answer writeAnswer was given at start, which
// nobody reads, failed as past its deadline and well within 5 s.
func cutWithinBound(t *testing.T, done <-chan error, start time.Time) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("an answer nobody reads: %v, want a deadline exceeded", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("an answer nobody reads held its writer %v", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an answer nobody reads held its writer past 10 s")
	}
}

// TestRenewalDue: a connection is kept only while the certificate it
// presented is not yet due for renewal (two thirds of its lifetime): a
// renewed one is presented only on a new handshake.
func TestRenewalDue(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{NotBefore: start, NotAfter: start.Add(90 * time.Hour)}}}
	for _, c := range []struct {
		name string
		cs   *tls.ConnectionState
		at   time.Time
		want bool
	}{
		{"plain HTTP", nil, start, false},
		{"no certificate (bearer over TLS)", &tls.ConnectionState{}, start, false},
		{"fresh", cs, start.Add(time.Hour), false},
		{"just before two thirds", cs, start.Add(59 * time.Hour), false},
		{"past two thirds", cs, start.Add(61 * time.Hour), true},
		{"expired", cs, start.Add(100 * time.Hour), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := renewalDue(c.cs, c.at); got != c.want {
				t.Fatalf("renewalDue = %v, want %v", got, c.want)
			}
		})
	}
}

// TestAnswerClaims_HostNotReadingHoldsNothing: the goroutine that composed
// a fan-out's chunk answers its claimed polls, and the rest of the chunk
// waits on it: a host that does not read costs it a small answer's bound,
// whatever the answer — its 200, or the 304 or 503 of a poll overtaken
// after its send row (before, those two were written with a worker's 30 s).
func TestAnswerClaims_HostNotReadingHoldsNothing(t *testing.T) {
	for _, overtaken := range []string{"", "superseded", "draining"} {
		t.Run("overtaken="+overtaken, func(t *testing.T) {
			s := &Server{Hub: &hub.Hub{}, Sends: &SendWriter{}, drainCh: make(chan struct{}), closeCh: make(chan net.Conn, 16)}
			server, host := net.Pipe() // unbuffered, and the host never reads
			defer server.Close()
			defer host.Close()
			ps := newPollSession(s, 1, "m1", "e1", 0, time.Now().Add(time.Minute))
			pp := &parkedPoll{pollSession: ps, conn: server, timer: time.NewTimer(time.Hour)}
			pp.state.Store(parkedHandling)
			comp := &models.Composed{MachineID: 1, Machine: "m1", Generation: 2, Envelope: []byte(`{"payload":"e30="}`)}
			snd := models.SendOf(comp, "ctl")
			switch overtaken {
			case "superseded":
				ps.Supersede() // the host's next poll, after the commit
			case "draining":
				close(s.drainCh)
			}
			done := make(chan struct{})
			go func() { s.answerClaims([]hub.Claim{{Poll: pp, Send: &snd, Composed: comp}}); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the composing goroutine still writing to a host that does not read after 10 s")
			}
		})
	}
}

// TestToWorker_NeverHoldsTheCaller: a woken parked poll handed to the
// workers while they are all busy (here: none reads the queue) is answered
// on a goroutine of its own; the caller — the hub's composing goroutine,
// or a handler superseding a poll — goes on.
func TestToWorker_NeverHoldsTheCaller(t *testing.T) {
	s := &Server{Hub: &hub.Hub{}, Sends: &SendWriter{}, drainCh: make(chan struct{}), closeCh: make(chan net.Conn, 16),
		parkedCh: make(chan *parkedPoll)}
	close(s.drainCh) // the poll's answer: 503
	server, host := net.Pipe()
	defer server.Close()
	defer host.Close()
	ps := newPollSession(s, 1, "m1", "e1", 0, time.Now().Add(time.Minute))
	pp := &parkedPoll{pollSession: ps, conn: server, timer: time.NewTimer(time.Hour)}
	pp.watched.Store(true)
	pp.state.Store(parkedHandling)
	returned := make(chan struct{})
	go func() { s.toWorker(pp); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("handing a poll to busy workers held the caller")
	}
	b := make([]byte, 12)
	if _, err := io.ReadFull(host, b); err != nil || string(b) != "HTTP/1.1 503" {
		t.Fatalf("the poll handed on was answered %q (%v), want a 503", b, err)
	}
}
