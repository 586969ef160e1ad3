package conns

import (
	"errors"
	"net"
	"testing"
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
