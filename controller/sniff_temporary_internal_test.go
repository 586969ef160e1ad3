package controller

import (
	"crypto/tls"
	"net"
	"syscall"
	"testing"
	"time"
)

// flakyListener fails its first Accept as accept(2) does when the process
// is out of descriptors (EMFILE, a temporary error), then accepts.
type flakyListener struct {
	net.Listener
	failed chan struct{} // closed once it has failed
}

func (l *flakyListener) Accept() (net.Conn, error) {
	select {
	case <-l.failed:
		return l.Listener.Accept()
	default:
		close(l.failed)
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
}

// TestSniffListener_AcceptsAgainAfterATemporaryError: out of descriptors for
// a moment (a flood, a burst of uploads), accept(2) fails with EMFILE.
// net/http's own Serve sleeps and accepts again; the listener that serves
// TLS and plain HTTP on one port (--host-bearer-until) must too, rather than
// stop for good and answer every later Accept with that one error — a
// controller whose port takes connections and never serves them again.
func TestSniffListener_AcceptsAgainAfterATemporaryError(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: inner, failed: make(chan struct{})}
	l := newSniffListener(fl, &tls.Config{})
	defer l.Close()

	// The first Accept may report the temporary error, as net.Listener
	// may; net/http then retries. What it must not do is keep reporting it.
	got := make(chan net.Conn, 1)
	go func() {
		for range 5 {
			c, err := l.Accept()
			if err == nil {
				got <- c
				return
			}
			if ne, ok := err.(net.Error); !ok || !ne.Temporary() { //nolint:staticcheck // as net/http judges it
				return
			}
			time.Sleep(10 * time.Millisecond) // net/http's pause between temporary errors
		}
	}()
	<-fl.failed
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case sc := <-got:
		sc.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("after one EMFILE from accept(2), the sniffing listener never accepts again")
	}
}
