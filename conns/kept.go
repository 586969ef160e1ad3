package conns

import (
	"net"
	"sync"
)

// Kept is a listener of connections handed back to the HTTP server after
// a hijack. A parked poll's connection is taken from net/http while it
// waits; once answered, it is given back here and served again, so the
// host's next poll arrives on the same connection instead of a new one (a
// new TCP connection, and over TLS a handshake, for every answer and every
// 304 of an idle fleet). The server Serves it beside its real listener;
// its Shutdown closes it with the others.
type Kept struct {
	addr   net.Addr
	ch     chan net.Conn
	closed chan struct{}
	mu     sync.Mutex // Give against Close: nothing queued after the close
	done   bool
}

// NewKept is a Kept listener reporting addr (the real listener's) that
// queues at most size connections not yet taken by the server.
func NewKept(addr net.Addr, size int) *Kept {
	return &Kept{addr: addr, ch: make(chan net.Conn, size), closed: make(chan struct{})}
}

// Give hands c back to the server. It reports false, and the caller closes
// c, when the listener is closed or its queue is full.
func (k *Kept) Give(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return false
	}
	select {
	case k.ch <- c:
		return true
	default:
		return false
	}
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

// Close stops Accept and closes the connections still queued.
func (k *Kept) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return nil
	}
	k.done = true
	close(k.closed)
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
