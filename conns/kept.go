package conns

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// Kept is a listener of connections handed back to the HTTP server after
// a hijack. A parked poll's connection is taken from net/http while it
// waits; once answered, it is given back here and served again, so the
// host's next poll arrives on the same connection instead of a new one (a
// new TCP connection, and over TLS a handshake, for every answer and every
// 304 of an idle fleet). The server Serves it beside its real listener;
// its Shutdown closes it with the others.
//
// A connection given back waits here, idle, until its host's next request
// arrives, and only then goes to the server. The server treats what it
// accepts as a new connection: it starts a goroutine with its buffers and
// gives the first request ReadHeaderTimeout from the accept. Handed over at
// once, an answered fan-out of 10,000 hosts started 10,000 of those in the
// middle of the fan-out for requests that come seconds later (after the
// host applies and reports), and a host whose apply outlasted
// ReadHeaderTimeout found its connection closed. Waiting, a connection
// costs a parked goroutine of the smallest stack and is closed after
// IdleTimeout with nothing sent, as the server closes its own idle
// keep-alive connections.
type Kept struct {
	addr    net.Addr
	idle    time.Duration
	ch      chan net.Conn
	closed  chan struct{}
	mu      sync.Mutex // Give against Close: nothing queued after the close
	done    bool
	waiting map[net.Conn]struct{} // given back, their next request not yet come
}

// NewKept is a Kept listener reporting addr (the real listener's) that
// queues at most size connections with a request come and not yet taken by
// the server.
func NewKept(addr net.Addr, size int) *Kept {
	return &Kept{addr: addr, idle: IdleTimeout, ch: make(chan net.Conn, size), closed: make(chan struct{}),
		waiting: map[net.Conn]struct{}{}}
}

// Give hands c back to the server once its next request arrives. It
// reports false, and the caller closes c, when the listener is closed.
// A connection whose request comes while the queue is full is closed (the
// host connects again).
func (k *Kept) Give(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return false
	}
	rc, ok := RawConn(c)
	if !ok {
		return k.queue(c)
	}
	k.waiting[c] = struct{}{}
	_ = c.SetReadDeadline(time.Now().Add(k.idle))
	go k.await(c, rc)
	return true
}

// queue puts c on the server's queue, or reports false when it is full.
// The caller holds mu.
func (k *Kept) queue(c net.Conn) bool {
	select {
	case k.ch <- c:
		return true
	default:
		return false
	}
}

// await waits until c has something to read (the next request, or its
// end), without reading it, then queues c for the server; it closes c when
// the idle time passes first or the listener closes.
func (k *Kept) await(c net.Conn, rc syscall.RawConn) {
	ended := false
	err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if errors.Is(err, syscall.EAGAIN) {
			return false // nothing there yet: wait
		}
		ended = n <= 0 // the host closed (or the socket failed)
		return true
	})
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.waiting[c]; !ok {
		return // closed by Close
	}
	delete(k.waiting, c)
	if err != nil || ended || k.done || ClearDeadlines(c) != nil || !k.queue(c) {
		_ = c.Close()
	}
}

// RawConn is c's socket, through TLS and the listener's wrapper.
func RawConn(c net.Conn) (syscall.RawConn, bool) {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}

// Accept returns the next connection given back.
func (k *Kept) Accept() (net.Conn, error) {
	select {
	case c := <-k.ch:
		return c, nil
	case <-k.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and closes the connections still queued or waiting.
func (k *Kept) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return nil
	}
	k.done = true
	close(k.closed)
	for c := range k.waiting {
		_ = c.Close()
	}
	clear(k.waiting)
	for {
		select {
		case c := <-k.ch:
			_ = c.Close()
		default:
			return nil
		}
	}
}

// Addr is the real listener's address.
func (k *Kept) Addr() net.Addr { return k.addr }
