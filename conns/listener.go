// Package conns protects the controller's listener and process from
// connection floods: it raises the open-file limit, caps open connections
// (answering the excess with a 503 while health probes keep a reserve), and
// sets the server's timeouts deliberately. It knows nothing of the API.
package conns

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ProbeReserve is the connections the controller keeps for health probes
// past its cap for everything else.
const ProbeReserve = 16

// PeekTimeout bounds how long a connection accepted over the soft cap may
// take to send the start of its request line before it is refused. It also
// bounds how long a flood of silent connections can hold the reserve.
const PeekTimeout = 2 * time.Second

// EvictAfter is how long a new connection may wait for its first request
// before a newer one past the soft cap may take its place (see Listener):
// the host that just connected is about to send its request.
const EvictAfter = time.Second

// RetryAfter is what a refused client is told to wait, in seconds.
const RetryAfter = 5

// probes are the request-line prefixes that may use the reserve. The path
// must end there: "GET /healthz " or "GET /healthz?".
var probes = [][]byte{[]byte("GET /healthz"), []byte("GET /readyz")}

// probePeek is how many bytes decide: the longest probe and one more.
const probePeek = len("GET /healthz") + 1

// tlsHandshake is the first byte of a TLS record carrying a ClientHello; an
// HTTP/1 request line never starts with it.
const tlsHandshake = 0x16

// Listener caps the connections a net.Listener hands out. Up to max-reserve
// open connections every new one is accepted as is. Past that, up to max, a
// new connection is admitted only if its request line is a GET of /healthz
// or /readyz; any other is answered 503 and closed. Past max, every new
// connection is answered 503 and closed.
//
// Under TLS (tls.NewListener(conns.Limit(…))), the path is encrypted, so
// the reserve is granted to any connection that starts with a TLS
// handshake. Refusing them instead would gain nothing: the reserve would sit
// idle while probes were refused with everything else, and the descriptors
// are still bounded by max. Granting it means a probe over TLS is refused
// only past max, not past max-reserve. A plaintext 503 cannot be written
// into a TLS stream either, so past max a TLS client sees a handshake error.
//
// A connection admitted from the reserve is then an ordinary one: a probe
// that keeps it alive for other requests keeps its slot until IdleTimeout.
// Kubelet's probes close their connections.
//
// Before a new connection past the soft cap is gated or refused, a
// connection that waits on its client, and on which no request has proved
// a credential, makes room for it: it is closed and the new one admitted
// as an ordinary one. Waiting on its client is being between requests,
// trickling a request's body (IdleUntilRead), writing an answer its client
// does not read (Write), or waiting for its first request — this last only
// once it has waited EvictAfter; the one that has waited longest goes
// first. A connection on which a host's or a person's credential was
// proved (Known, up to KnownPer of each) is never closed so, nor is a
// request the controller is working on or a parked poll: an outsider's
// newcomers never take a connection a host already has. Without it,
// anyone could hold every slot with connections kept alive by one cheap
// request a minute (or by none, by connecting again every
// ReadHeaderTimeout; or by trickling a login's body, or reading no answer,
// for as long as their deadlines), and every host without a connection
// would be refused until they stopped. Now an outsider without a
// credential holds a slot only while the controller works on its request,
// or by connecting again each EvictAfter. Only connections the listener
// tracks (Track) are ever closed so.
type Listener struct {
	net.Listener
	max, soft int
	refusal   []byte

	open     atomic.Int64
	refused  atomic.Uint64
	reserved atomic.Uint64
	evicted  atomic.Uint64
	// peekTimeout is PeekTimeout and evictAfter EvictAfter; tests
	// change them.
	peekTimeout, evictAfter time.Duration
	// track: see Track. Set before serving, read-only after.
	track bool

	mu sync.Mutex
	// The connections that may make room, each list of *conn oldest
	// first: fresh, waiting for their first request; idle, the others
	// that wait on their client (see Listener). Known ones are on neither.
	fresh, idle list.List
	knownBy     map[string]int // the known connections of each principal
}

// Limit wraps l so at most limit connections are open, reserve of them kept
// for health probes (see Listener). reserve is clamped to [0, limit/2], so a
// small cap still serves ordinary traffic. limit must be positive.
func Limit(l net.Listener, limit, reserve int) *Listener {
	if limit <= 0 {
		panic(fmt.Sprintf("conns.Limit: limit %d: must be positive", limit))
	}
	reserve = min(max(reserve, 0), limit/2)
	return &Listener{Listener: l, max: limit, soft: limit - reserve, refusal: refusal(limit),
		peekTimeout: PeekTimeout, evictAfter: EvictAfter}
}

// refusal is the whole 503 response: written raw, because a refused
// connection never reaches net/http.
func refusal(limit int) []byte {
	body := fmt.Sprintf(`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"too many connections: this controller holds its limit of %d; retry in %d s"}`, limit, RetryAfter)
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nRetry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", RetryAfter, len(body), body)
}

// Open is the connections open now: handed out and not yet closed.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused is the connections answered 503 since the start.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Reserved is the connections admitted from the reserve since the start:
// probes, and under TLS any connection.
func (l *Listener) Reserved() uint64 { return l.reserved.Load() }

// Evicted is the idle connections closed since the start to make room
// for new ones past the soft cap.
func (l *Listener) Evicted() uint64 { return l.evicted.Load() }

// Track has l follow srv's connections (through TLS or not) by their
// states, and lets idle ones make room past the soft cap (see Listener):
// a connection between requests is idle, one in a request or taken over
// (a parked poll) is not. Call it before srv serves l. Without it no
// connection is ever closed to make room: l could not tell one in a
// request from one between requests.
func (l *Listener) Track(srv *http.Server) {
	l.track = true
	if prev := srv.ConnState; prev != nil {
		srv.ConnState = func(c net.Conn, s http.ConnState) { l.connState(c, s); prev(c, s) }
	} else {
		srv.ConnState = l.connState
	}
	// Requests know their connection, for IdleUntilRead.
	prevCtx := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		return context.WithValue(ctx, connKey{}, c)
	}
}

type connKey struct{}

// IdleUntilRead counts the connection r came on as idle (see Listener)
// until r's body has been read to its end or failed, and returns what
// counts it in use again, for when the handler returns. A connection a
// credential was proved on (Known) is never counted idle, so it is for
// the others: a client that trickles a body no credential came with yet
// (a login's, a webhook's, a dashboard form's, read for its CSRF token
// before the session is checked) held its slot for the whole body
// deadline, a cheaper way than any to hold every slot.
func IdleUntilRead(r *http.Request) (done func()) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if c == nil {
		return func() {}
	}
	cc := counted(c)
	if cc == nil || !cc.l.track {
		return func() {}
	}
	cc.l.markIdle(cc)
	r.Body = &busyOnceRead{ReadCloser: r.Body, c: cc}
	return func() { cc.l.markBusy(cc) }
}

// busyOnceRead counts its connection in use again once its body is read.
type busyOnceRead struct {
	io.ReadCloser
	c    *conn
	read bool
}

func (b *busyOnceRead) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.read {
		b.read = true
		b.c.l.markBusy(b.c)
	}
	return n, err
}

func (l *Listener) connState(c net.Conn, s http.ConnState) {
	cc := counted(c)
	if cc == nil || cc.l != l {
		return
	}
	switch s {
	case http.StateIdle:
		l.markIdle(cc)
	case http.StateActive:
		l.mu.Lock()
		l.unlistLocked(cc)
		cc.fresh = false // a request came
		l.mu.Unlock()
	case http.StateHijacked, http.StateClosed:
		l.markBusy(cc)
	}
	// StateNew: a new connection was listed fresh at its Accept.
}

// Idle marks c, taken from the server after a request and given back to
// wait for its next one (Kept), as idle; Busy marks it in use again.
// Connections not from a Listener are ignored.
func Idle(c net.Conn) {
	if cc := counted(c); cc != nil {
		cc.l.markIdle(cc)
	}
}

// Busy: see Idle.
func Busy(c net.Conn) {
	if cc := counted(c); cc != nil {
		cc.l.markBusy(cc)
	}
}

// KnownPer is how many connections of one principal are known at once
// (Known): a host keeps one or two, a browser six; past it, one more
// credential's connections make room as unknown ones do, so one copied
// host token or one viewer's token cannot pin every slot.
const KnownPer = 8

// Known marks the connection r came on as one a request proved a
// credential on (a host's or a person's: kind "machine" or "person", and
// its name): it is never closed to make room (see Listener), so an
// outsider's newcomers cannot take the connection a host or an operator
// already has. At most KnownPer connections of one principal are known.
func Known(r *http.Request, kind, name string) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if c == nil {
		return
	}
	cc := counted(c)
	if cc == nil || !cc.l.track || cc.known.Load() {
		return // a host's every poll comes here: once is enough
	}
	who := kind + ":" + name // built past the check: not on every poll
	l := cc.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if cc.closed.Load() || l.knownBy[who] >= KnownPer {
		return
	}
	if l.knownBy == nil {
		l.knownBy = map[string]int{}
	}
	l.knownBy[who]++
	cc.knownAs = who
	cc.known.Store(true)
	l.unlistLocked(cc)
}

// counted is the connection a Listener handed out under c: c itself, or
// what c's TLS runs over.
func counted(c net.Conn) *conn {
	switch cc := Transport(c).(type) {
	case *conn:
		return cc
	case *gatedConn:
		return cc.conn
	}
	return nil
}

// markIdle lists c among those that may make room (listLocked) and
// reports whether it did: a write that waits on its client undoes only its
// own mark.
func (l *Listener) markIdle(c *conn) bool {
	if !l.track {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listLocked(c)
}

func (l *Listener) markBusy(c *conn) {
	l.mu.Lock()
	l.unlistLocked(c)
	l.mu.Unlock()
}

// listLocked puts c among those that may make room, unless it is already,
// known or closed, and reports whether it did: the fresh (no request yet)
// and the idle are listed apart, each oldest first. The caller holds mu.
func (l *Listener) listLocked(c *conn) bool {
	if c.elem != nil || c.known.Load() || c.closed.Load() {
		return false
	}
	c.idleSince = time.Now()
	c.onFresh = c.fresh
	if c.onFresh {
		c.elem = l.fresh.PushBack(c)
	} else {
		c.elem = l.idle.PushBack(c)
	}
	return true
}

// unlistLocked takes c off its list, if it is on one. The caller holds mu.
func (l *Listener) unlistLocked(c *conn) {
	if c.elem == nil {
		return
	}
	if c.onFresh {
		l.fresh.Remove(c.elem)
	} else {
		l.idle.Remove(c.elem)
	}
	c.elem = nil
}

// evictOne closes the connection that makes room (see Listener) and
// reports whether there was one: of the unknown ones waiting on their
// client, the one that has waited longest, counting one that waits for its
// first request only once it has waited evictAfter.
func (l *Listener) evictOne() bool {
	l.mu.Lock()
	e := l.idle.Front()
	if f := l.fresh.Front(); f != nil && time.Since(f.Value.(*conn).idleSince) >= l.evictAfter &&
		(e == nil || f.Value.(*conn).idleSince.Before(e.Value.(*conn).idleSince)) {
		e = f
	}
	if e == nil {
		l.mu.Unlock()
		return false
	}
	c := e.Value.(*conn)
	l.unlistLocked(c)
	l.mu.Unlock()
	// Beneath TLS: no close_notify, which could wait on a client that
	// stopped reading. The server's read fails and it lets go.
	_ = c.Close()
	l.evicted.Add(1)
	return true
}

// Accept returns the next connection within the cap. Connections past max
// are refused here, without waiting for their request: a flood past the cap
// costs one write and one close each, never a goroutine or a held
// descriptor. Those past the soft cap are decided on their first read, in
// the server's goroutine for that connection, so Accept never waits on a
// client.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		n := int(l.open.Add(1))
		c := &conn{Conn: nc, l: l, fresh: true}
		if sc, ok := nc.(syscall.Conn); ok && l.track {
			c.rc, _ = sc.SyscallConn()
		}
		switch {
		case n <= l.soft || l.evictOne(): // the evicted one's slot is its
			l.markIdle(c) // until its first request
			return c, nil
		case n <= l.max:
			l.markIdle(c)
			return &gatedConn{conn: c}, nil
		}
		l.open.Add(-1)
		l.refused.Add(1)
		refuseNow(nc, l.refusal)
	}
}

// refuseNow answers 503 and closes, without waiting on the client. The
// request bytes already received are read first: closing a socket with
// unread data sends a reset, and a client may then lose the answer.
func refuseNow(c net.Conn, refusal []byte) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)) // a fresh socket's buffer takes it at once
	_, _ = c.Write(refusal)
	drainReceived(c)
	_ = c.Close()
}

// drainReceived reads what the kernel holds for c, without waiting.
func drainReceived(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var b [4096]byte
	_ = rc.Read(func(fd uintptr) bool {
		for range 16 {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_DONTWAIT)
			if n <= 0 || err != nil {
				break
			}
		}
		return true // never wait
	})
}

// conn counts itself out of its listener when closed, once.
type conn struct {
	net.Conn
	l      *Listener
	closed atomic.Bool
	rc     syscall.RawConn // the socket's, for Write; nil: none

	// Guarded by l.mu: its place on l.fresh or l.idle (nil: on
	// neither), and since when; fresh: no request has come on it yet;
	// known: a request on it proved a credential (Known).
	elem      *list.Element
	idleSince time.Time
	fresh     bool
	onFresh   bool        // elem is on l.fresh, not l.idle
	known     atomic.Bool // set under l.mu
	knownAs   string      // whose, once known; guarded by l.mu
}

// Write writes p as the socket's own Write does, deadline and all. While
// it waits for the client to take what its socket could not, the
// connection counts as idle (see Listener): a client that asks for answers
// and reads none — one large one, or many small ones on one connection —
// holds no slot past the cap for the write's whole deadline.
func (c *conn) Write(p []byte) (int, error) {
	if !c.l.track || c.rc == nil {
		return c.Conn.Write(p)
	}
	var n int
	var werr error
	waiting := false
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			k, err := syscall.Write(int(fd), p[n:])
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				if !waiting {
					waiting = c.l.markIdle(c)
				}
				return false // wait for room, within the deadline
			case err != nil:
				werr = os.NewSyscallError("write", err)
				return true
			}
			n += k
		}
		return true
	})
	if waiting {
		c.l.markBusy(c)
	}
	var oe *net.OpError
	switch {
	case errors.As(err, &oe): // the raw write's own (a deadline, a close): said as a write's
		oe.Op = "write"
	case err == nil && werr != nil:
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: werr}
	}
	return n, err
}

// Close closes the connection; the first call counts it out.
func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		l := c.l
		l.mu.Lock()
		l.unlistLocked(c)
		if c.knownAs != "" {
			if l.knownBy[c.knownAs]--; l.knownBy[c.knownAs] <= 0 {
				delete(l.knownBy, c.knownAs)
			}
		}
		l.mu.Unlock()
		l.open.Add(-1)
	}
	return err
}

// CloseWrite keeps net/http's graceful close (FIN, then wait for the
// client) working through the wrapper.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps sendfile for file responses.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// SyscallConn reaches the socket: the API checks whether a parked poll's
// peer is still there with it.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// gatedConn is a connection accepted past the soft cap. Its first read
// decides: a probe (or TLS) is admitted, the bytes read to decide replayed
// to the server; anything else is answered 503 and reads as EOF, which the
// server closes without a word.
type gatedConn struct {
	*conn
	once    sync.Once
	refused bool
	br      *bufio.Reader // the bytes read to decide, until replayed

	// mu guards rd, the read deadline the server last set: the peek
	// shortens it and must put it back.
	mu sync.Mutex
	rd time.Time
}

func (c *gatedConn) Read(p []byte) (int, error) {
	c.once.Do(c.decide)
	if c.refused {
		return 0, io.EOF
	}
	if c.br != nil {
		if c.br.Buffered() > 0 {
			return c.br.Read(p)
		}
		c.br = nil
	}
	return c.Conn.Read(p)
}

func (c *gatedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd = t
	return c.Conn.SetDeadline(t)
}

func (c *gatedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rd = t
	return c.Conn.SetReadDeadline(t)
}

// decide peeks the start of the request within the peek timeout (or the
// server's own read deadline, if sooner).
func (c *gatedConn) decide() {
	c.mu.Lock()
	peekBy := time.Now().Add(c.l.peekTimeout)
	if !c.rd.IsZero() && c.rd.Before(peekBy) {
		peekBy = c.rd
	}
	_ = c.Conn.SetReadDeadline(peekBy)
	c.mu.Unlock()

	c.br = bufio.NewReaderSize(c.Conn, 1024)
	head, err := c.br.Peek(1)
	if err == nil && head[0] != tlsHandshake {
		head, err = c.br.Peek(probePeek)
	}
	switch {
	case err == nil && (head[0] == tlsHandshake || isProbe(head)):
		c.l.reserved.Add(1)
		c.mu.Lock()
		_ = c.Conn.SetReadDeadline(c.rd)
		c.mu.Unlock()
		return
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed):
		c.refused = true // the client left, or the server closed it: nobody to answer
		return
	}
	c.refused = true
	c.l.refused.Add(1)
	c.skipHeader(peekBy)
	_ = c.Conn.SetWriteDeadline(peekBy.Add(time.Second))
	_, _ = c.Conn.Write(c.l.refusal)
	drainReceived(c.Conn)
}

// skipHeader reads the rest of the request's header, so the close after
// the 503 is clean rather than a reset that could lose it. A body is not
// read; a client that sent one may see a reset.
func (c *gatedConn) skipHeader(by time.Time) {
	_ = c.Conn.SetReadDeadline(by)
	for read := 0; read < 16<<10; {
		line, err := c.br.ReadSlice('\n')
		read += len(line)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil || len(bytes.TrimRight(line, "\r\n")) == 0 {
			return
		}
	}
}

// isProbe reports whether a request line starts with a GET of a health
// path, ending there or at its query.
func isProbe(head []byte) bool {
	for _, p := range probes {
		if bytes.HasPrefix(head, p) && len(head) > len(p) && (head[len(p)] == ' ' || head[len(p)] == '?') {
			return true
		}
	}
	return false
}
