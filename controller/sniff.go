package controller

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// sniffListener serves TLS and plain HTTP on one port, for the hosts that
// were enrolled over plain HTTP before the controller served TLS
// (--host-bearer-until): their URL stays valid while they move. It looks
// at each connection's first byte without taking it (MSG_PEEK): a TLS
// handshake starts with 0x16 and is handed to tls.Server, so net/http
// sees a *tls.Conn and fills Request.TLS; anything else is served plain,
// and the API lets plain requests reach the host protocol only. Each
// connection is looked at in its own goroutine, so a client that sends
// nothing holds up no other.
type sniffListener struct {
	net.Listener
	conf   *tls.Config
	conns  chan net.Conn
	errc   chan error
	closed chan struct{}
	once   sync.Once
}

// sniffTimeout bounds the wait for a connection's first byte.
const sniffTimeout = 10 * time.Second

func newSniffListener(inner net.Listener, conf *tls.Config) *sniffListener {
	l := &sniffListener{Listener: inner, conf: conf, conns: make(chan net.Conn), errc: make(chan error, 1), closed: make(chan struct{})}
	go l.run()
	return l
}

func (l *sniffListener) run() {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Out of descriptors or buffers for a moment (EMFILE, ENFILE,
			// ENOBUFS under a flood): wait and accept again, as net/http
			// does. Only an error that will not pass ends the listener:
			// it did, for good, at the first of these.
			if errors.As(err, &ne) && ne.Temporary() { //nolint:staticcheck // as net/http judges an accept error
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.closed:
				}
			}
			l.errc <- err
			return
		}
		delay = 0
		go l.sniff(c)
	}
}

func (l *sniffListener) sniff(c net.Conn) {
	isTLS, err := firstByteIsTLS(c)
	if err != nil {
		_ = c.Close()
		return
	}
	if isTLS {
		c = tls.Server(c, l.conf)
	}
	select {
	case l.conns <- c:
	case <-l.closed:
		_ = c.Close()
	}
}

// firstByteIsTLS waits (up to sniffTimeout) for c's first byte and says
// whether it opens a TLS handshake record, leaving it to be read.
func firstByteIsTLS(c net.Conn) (bool, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true, nil // cannot look: TLS, the default
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, err
	}
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	var n int
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return !errors.Is(perr, syscall.EAGAIN)
	})
	if err != nil {
		return false, err
	}
	if perr != nil || n == 0 {
		return false, errors.New("closed before its first byte")
	}
	return b[0] == 0x16, nil
}

// Accept returns the next connection, TLS or plain.
func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errc:
		l.errc <- err
		return nil, err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting.
func (l *sniffListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}
