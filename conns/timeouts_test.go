package conns

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

func TestServerTimeouts(t *testing.T) {
	srv := &http.Server{ReadTimeout: time.Second, WriteTimeout: time.Second}
	ServerTimeouts(srv)
	if srv.ReadHeaderTimeout != 10*time.Second || srv.IdleTimeout != 60*time.Second {
		t.Errorf("ReadHeaderTimeout %v, IdleTimeout %v; want 10s, 60s", srv.ReadHeaderTimeout, srv.IdleTimeout)
	}
	if srv.ReadTimeout != 0 || srv.WriteTimeout != 0 {
		t.Errorf("ReadTimeout %v, WriteTimeout %v; want none (long polls, uploads)", srv.ReadTimeout, srv.WriteTimeout)
	}
}

// ReadAllUntilClosed reads c until the server closes it; a read that hits
// the client's own deadline fails the test.
func ReadAllUntilClosed(tb testing.TB, c net.Conn) string {
	tb.Helper()
	b, err := io.ReadAll(c)
	if err != nil {
		tb.Fatalf("the server did not close the connection: %v (read %q)", err, b)
	}
	return string(b)
}

func TestServerTimeouts_SlowHeaderCut(t *testing.T) {
	l, addr := MustServe(t, 20, 5, func(srv *http.Server, _ *Listener) { srv.ReadHeaderTimeout = 100 * time.Millisecond })
	c := MustDial(t, addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: mesh\r\n"); err != nil { // never the blank line
		t.Fatal(err)
	}
	ReadAllUntilClosed(t, c)
	WaitOpen(t, l, 0)
}

func TestServerTimeouts_IdleKeepAliveClosed(t *testing.T) {
	l, addr := MustServe(t, 20, 5, func(srv *http.Server, _ *Listener) { srv.IdleTimeout = 100 * time.Millisecond })
	c := MustDial(t, addr)
	if resp, body := Get(t, c, "/", true); resp.StatusCode != http.StatusOK || body != "hello" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if rest := ReadAllUntilClosed(t, c); rest != "" {
		t.Errorf("after the idle close: %q", rest)
	}
	WaitOpen(t, l, 0)
}

// ServeOne serves h on a fresh listener until the test ends.
func ServeOne(tb testing.TB, h http.HandlerFunc) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	ServerTimeouts(srv)
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// Await takes the handler's result, failing after 5 s.
func Await[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		tb.Fatal("waited 5s for the handler")
	}
	panic("unreachable")
}

func TestBodyDeadline_CutsSlowBody(t *testing.T) {
	got := make(chan error, 1)
	addr := ServeOne(t, func(w http.ResponseWriter, r *http.Request) {
		if err := BodyDeadline(w, 100*time.Millisecond); err != nil {
			got <- fmt.Errorf("BodyDeadline: %w", err)
			return
		}
		_, err := io.ReadAll(r.Body)
		got <- err
	})
	c := MustDial(t, addr)
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: mesh\r\nContent-Length: 10\r\n\r\n12"); err != nil {
		t.Fatal(err)
	}
	if err := Await(t, got); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("reading a body that stalls: %v, want a deadline error", err)
	}
}

// Pins what BodyDeadline's comment warns of: a deadline that passes while a
// handler waits cancels its request.
func TestBodyDeadline_PassingWhileWaitingCancelsRequest(t *testing.T) {
	got := make(chan error, 1)
	addr := ServeOne(t, func(w http.ResponseWriter, r *http.Request) {
		_ = BodyDeadline(w, 50*time.Millisecond)
		select {
		case <-r.Context().Done():
			got <- r.Context().Err()
		case <-time.After(5 * time.Second):
			got <- nil
		}
	})
	c := MustDial(t, addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: mesh\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := Await(t, got); err == nil {
		t.Error("the request outlived its passed deadline; BodyDeadline's comment is out of date")
	}
}

func TestClearDeadlines(t *testing.T) {
	got := make(chan error, 1)
	addr := ServeOne(t, func(w http.ResponseWriter, r *http.Request) {
		_ = BodyDeadline(w, time.Nanosecond) // passed by the time of any read
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			got <- err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(-time.Second))
		if err := ClearDeadlines(conn); err != nil {
			got <- err
			return
		}
		if _, err := io.WriteString(conn, "parked\n"); err != nil {
			got <- err
			return
		}
		_, err = buf.ReadByte()
		got <- err
	})
	c := MustDial(t, addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: mesh\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "parked\n" {
		t.Fatalf("%q, %v", line, err)
	}
	if _, err := io.WriteString(c, "x"); err != nil {
		t.Fatal(err)
	}
	if err := Await(t, got); err != nil {
		t.Errorf("reading a hijacked connection after ClearDeadlines: %v", err)
	}
}
