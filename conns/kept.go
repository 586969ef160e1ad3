package conns

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
// ReadHeaderTimeout found its connection closed. A connection waiting is
// closed after IdleTimeout with nothing sent, as the server closes its own
// idle keep-alive connections.
//
// The connections waiting are watched by one epoll set and one goroutine
// (run): giving one back is a map entry and one system call. A goroutine
// of its own per connection, with a read deadline for the idle time, cost
// a fan-out ~7 µs of controller CPU a machine, and every waiting
// connection a goroutine's stack.
type Kept struct {
	addr   net.Addr
	idle   time.Duration
	ch     chan net.Conn
	closed chan struct{}
	epfd   int // -1: no epoll set, a connection is handed over at once

	mu      sync.Mutex // Give against Close and run: nothing queued after the close
	done    bool
	other   func(fd, seq int32) // the events no waiting connection claims go to the set's sharer (Share)
	waiting map[int32]*waiter   // by descriptor: given back, their next request not yet come
	order   []*waiter           // in the order given, so by idle deadline; an entry no longer in waiting was taken
}

// waiter is a connection given back and watched for its next request.
type waiter struct {
	c     net.Conn
	fd    int32
	seq   int32     // tells this registration from a later one of a reused descriptor
	until time.Time // closed if nothing comes by then
}

// NewKept is a Kept listener reporting addr (the real listener's) that
// queues at most size connections with a request come and not yet taken by
// the server.
func NewKept(addr net.Addr, size int) *Kept {
	k := &Kept{addr: addr, idle: IdleTimeout, ch: make(chan net.Conn, size), closed: make(chan struct{}),
		waiting: map[int32]*waiter{}}
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		k.epfd = -1
		return k
	}
	k.epfd = fd
	go k.run()
	return k
}

// Give hands c back to the server once its next request arrives. It
// reports false, and the caller closes c, when the listener is closed.
// A connection whose request comes while the queue is full is closed (the
// host connects again).
func (k *Kept) Give(c net.Conn) bool {
	fd, ok := FD(c)
	if !ok {
		fd = -1
	}
	return k.GiveFD(c, fd)
}

// GiveFD is Give for a caller that knows c's descriptor (-1: it has
// none), as a parked poll does: finding it again through TLS and the
// listener's wrapper was ~0.7 µs of each answer of a fan-out.
func (k *Kept) GiveFD(c net.Conn, fd int32) bool {
	Idle(c) // a new connection past the cap may take its place
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return false
	}
	if fd < 0 || k.epfd < 0 {
		return k.queue(c)
	}
	w := &waiter{c: c, fd: fd, seq: NextSeq(), until: time.Now().Add(k.idle)}
	// One event: the next request, or the host's close.
	if ArmOnce(k.epfd, fd, w.seq) != nil {
		return k.queue(c)
	}
	k.waiting[fd] = w
	k.order = append(k.order, w)
	return true
}

// Share lets another watcher of connections use k's epoll set and
// goroutine, and reports whether it can (false: k has none, and the sharer
// keeps its own). The sharer arms its descriptors there (Arm, numbered by
// NextSeq) and is handed, from k's goroutine and never under k's lock,
// every event no connection given back to k claims. A parked poll's
// connection is watched for its host's departure while it waits; once
// answered it is given back here, armed again in the same set, which
// replaces the watch's registration. In two sets, the host's next request
// woke both goroutines, the watch's for an event nothing claimed: one
// wake-up in two of an idle fleet's polls, ~13% of the controller's CPU at
// rest.
func (k *Kept) Share(other func(fd, seq int32)) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.epfd < 0 || k.done {
		return false
	}
	k.other = other
	return true
}

// Arm is ArmOnce in k's epoll set, for its sharer (Share). It fails once
// k is closed: its goroutine then closes the set, whose number may soon
// name another file, and no one waits on it any more.
func (k *Kept) Arm(fd, seq int32) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done || k.epfd < 0 {
		return net.ErrClosed
	}
	return ArmOnce(k.epfd, fd, seq)
}

// seqs numbers the registrations in every epoll set of this package's
// users.
var seqs atomic.Int32

// NextSeq is a new registration's number for ArmOnce, unique among those
// of every set (until it wraps, after 2^32 registrations): the Kept
// listener and a watcher sharing its set (Share) take theirs from it, so
// an event of one is never taken for the other's.
func NextSeq() int32 { return seqs.Add(1) }

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

// run waits for the waiting connections' events until the listener is
// closed: a connection with something to read (its next request, not
// read here) is queued for the server; one whose host closed, or that
// stayed idle past its deadline, is closed.
func (k *Kept) run() {
	events := make([]unix.EpollEvent, 256)
	var closing []net.Conn
	var others []unix.EpollEvent
	for {
		// The wait's timeout is the idle deadlines' tick.
		n, err := unix.EpollWait(k.epfd, events, 500)
		if err != nil && !errors.Is(err, unix.EINTR) {
			// Not expected (only run closes the set); not a busy loop
			// if it comes: the next tick tries again.
			n = 0
			time.Sleep(500 * time.Millisecond)
		}
		k.mu.Lock()
		if k.done {
			k.mu.Unlock()
			_ = unix.Close(k.epfd)
			return
		}
		for _, ev := range events[:max(n, 0)] {
			w := k.waiting[ev.Fd]
			if w == nil || w.seq != ev.Pad {
				// An earlier registration of the descriptor, or the
				// sharer's (registrations are numbered from one
				// sequence, NextSeq: one never passes for another).
				if k.other != nil {
					others = append(others, ev)
				}
				continue
			}
			switch k.peek(w) {
			case peekNothing:
				continue // armed again; it waits on
			case peekData:
				Busy(w.c) // its request is here
				if ClearDeadlines(w.c) == nil && k.queue(w.c) {
					delete(k.waiting, w.fd)
					continue
				}
			}
			delete(k.waiting, w.fd)
			closing = append(closing, w.c)
		}
		closing = k.expire(time.Now(), closing)
		other := k.other
		k.mu.Unlock()
		// Outside mu: the sharer may give a connection back (GiveFD).
		for _, ev := range others {
			other(ev.Fd, ev.Pad)
		}
		others = others[:0]
		// Closed outside mu, so Give, on a fan-out's path, never waits
		// on them, and beneath TLS: a host that closed, or that sent
		// nothing for the idle time, is not sent close_notify, a write
		// that waits up to 5 s on a host that stopped reading.
		for i, c := range closing {
			_ = Transport(c).Close()
			closing[i] = nil
		}
		closing = closing[:0]
	}
}

// What a waiting connection's socket holds (peek).
const (
	peekData    = iota // its next request: it goes to the server
	peekEnded          // its host closed, or the socket failed
	peekNothing        // nothing after all: it was armed again
)

// peek looks at w's socket without reading from it. The caller holds mu,
// under which alone a waiting connection is taken (closed or queued), so
// its descriptor is w's.
func (k *Kept) peek(w *waiter) int {
	var b [1]byte
	n, _, err := unix.Recvfrom(int(w.fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	switch {
	case errors.Is(err, unix.EAGAIN):
		// An event with nothing to read: wait on, or the connection
		// would reach the server idle and be cut by its header timeout.
		if ArmOnce(k.epfd, w.fd, w.seq) == nil {
			return peekNothing
		}
		return peekEnded
	case n > 0:
		return peekData
	}
	return peekEnded
}

// expire takes the connections whose idle deadline passed, appending
// them to closing for the caller to close. The caller holds mu.
func (k *Kept) expire(now time.Time, closing []net.Conn) []net.Conn {
	i := 0
	for ; i < len(k.order); i++ {
		w := k.order[i]
		if k.waiting[w.fd] == w { // not taken since: its request came, or it was given back again
			if now.Before(w.until) {
				break
			}
			delete(k.waiting, w.fd)
			closing = append(closing, w.c)
		}
		k.order[i] = nil // not kept alive by the queue's array
	}
	k.order = k.order[i:]
	return closing
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
	for _, w := range k.waiting {
		_ = Transport(w.c).Close()
	}
	clear(k.waiting)
	k.order = nil
	for {
		select {
		case c := <-k.ch:
			_ = Transport(c).Close()
		default:
			return nil
		}
	}
}

// Addr is the real listener's address.
func (k *Kept) Addr() net.Addr { return k.addr }
