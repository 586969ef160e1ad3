package conns

import (
	"net"
	"net/http"
	"time"
)

// The server's timeouts: see ServerTimeouts.
const (
	ReadHeaderTimeout = 10 * time.Second
	IdleTimeout       = 60 * time.Second
)

// Body deadlines for BodyDeadline: JSON bodies are small; an upload is up
// to 512 MiB, which takes ~30 min at 2.5 Mbit/s.
const (
	JSONBodyTimeout   = 30 * time.Second
	UploadBodyTimeout = 30 * time.Minute
)

// MaxHeaderBytes bounds a request's header. Every header a client of the
// controller sends is small (a token, a few X-Mesh- fields); net/http's
// default of 1 MiB let anyone hold a MiB of the controller's memory a
// connection with a header left unfinished until ReadHeaderTimeout. A
// larger header is answered 431.
const MaxHeaderBytes = 64 << 10

// ServerTimeouts sets srv's timeouts for a server that holds long polls,
// and bounds its request headers (MaxHeaderBytes).
//
//   - ReadHeaderTimeout cuts a client that trickles its header (slowloris):
//     without it a connection that never finishes a request holds a
//     descriptor and a goroutine for ever.
//   - IdleTimeout closes keep-alive connections idle between requests, so
//     clients that went away without a FIN do not pile up. It never cuts a
//     request in progress, so a long poll is safe from it.
//   - No ReadTimeout: it covers the body, and one value cannot fit both a
//     1 KiB JSON body and a 512 MiB upload; handlers set BodyDeadline.
//   - No WriteTimeout: it runs from the end of the header to the end of the
//     response, so it would cut every long poll that waits longer, and a
//     large blob to a slow host.
func ServerTimeouts(srv *http.Server) {
	srv.ReadHeaderTimeout = ReadHeaderTimeout
	srv.IdleTimeout = IdleTimeout
	srv.ReadTimeout = 0
	srv.WriteTimeout = 0
	srv.MaxHeaderBytes = MaxHeaderBytes
}

// BodyDeadline sets the read deadline of w's connection d from now, for the
// request body (JSONBodyTimeout for most routes, UploadBodyTimeout for
// uploads); d <= 0 clears it. Call it before reading the body. net/http puts
// its own deadline back before the next request on the connection.
//
// A handler that reads its body and then waits must clear the deadline
// (BodyDeadline(w, 0)) once the body is read: when it passes, net/http's
// background read of the connection fails and cancels the request's
// context. A long-poll GET never calls it.
//
// A connection hijacked after BodyDeadline and then held (a parked poll)
// must have its deadlines cleared: see ClearDeadlines.
func BodyDeadline(w http.ResponseWriter, d time.Duration) error {
	var t time.Time
	if d > 0 {
		t = time.Now().Add(d)
	}
	return http.NewResponseController(w).SetReadDeadline(t)
}

// ClearDeadlines clears c's read and write deadlines. Call it on a
// connection taken from net/http (Hijack) that is held longer than a
// request: a body or header deadline left on it would fail its next read or
// write. net/http's Hijack clears them itself today; clearing them where the
// connection is kept says so and does not rest on that.
func ClearDeadlines(c net.Conn) error { return c.SetDeadline(time.Time{}) }
