package api

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"mesh/conns"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mesh/hub"
	"mesh/models"
)

// A parked poll is a long poll that waits without a goroutine: its
// connection is taken from net/http (hijacked) and kept in the hub with a
// timer. A waiting goroutine with its stack and net/http's per-connection
// buffers costs ~30 KiB; a parked poll well under 1 KiB, so 10,000 idle
// hosts cost the controller little. When its machine changes, a worker
// answers it (the send row committed first); when its wait passes, the
// timer answers 304. An answered 200 or 304 gives the connection back to
// the HTTP server (Server.Kept), which serves the host's next poll on it:
// no new connection, and over TLS no handshake, per answer. A connection
// is closed instead when the host asked for that, when bytes it sent are
// still buffered, while the instance drains (its hosts move on), for any
// other answer, and when the host's certificate is due for renewal (a
// renewed one is presented only on a new handshake).

// parkMin is the shortest wait worth parking; shorter ones wait in place.
const parkMin = time.Second

// parkWorkers answer woken parked polls. Each waits on the group commit of
// its send row, so their number bounds the rows one commit carries; a few
// hundred goroutines are a fixed cost, not a per-poll one.
const parkWorkers = 512

// Parked poll states.
const (
	parkedWaiting = iota
	parkedHandling
	parkedDone
)

type parkedPoll struct {
	*pollSession
	conn  net.Conn
	timer *time.Timer
	state atomic.Int32
	// tlsHint is X-Mesh-TLS for a poll that came over plain HTTP.
	tlsHint string
	// keep: the connection may serve the host's next poll.
	keep bool
	// watched: the peer watch has the connection (peerWatch.arm), so a
	// host that leaves is told by its event rather than by looking.
	watched atomic.Bool
	// left: the watch saw the host leave while a worker held the poll.
	left atomic.Bool
	// fd is the connection's descriptor, found once at park for the
	// peer watch and the kept listener; hasFD false: it has none (the
	// zero value, so a parkedPoll made without one never names fd 0).
	fd    int32
	hasFD bool
}

// park hijacks the connection and leaves the poll's session in the hub.
func (s *Server) park(w http.ResponseWriter, r *http.Request, ps *pollSession, changed <-chan struct{}) error {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	keep := s.Kept != nil && !r.Close && r.ProtoAtLeast(1, 1) && brw.Reader.Buffered() == 0 && !renewalDue(r.TLS, s.Now())
	pp := &parkedPoll{pollSession: ps, conn: conn, tlsHint: w.Header().Get(HeaderTLS), keep: keep}
	pp.fd, pp.hasFD = conns.FD(conn)
	pp.timer = time.AfterFunc(time.Until(ps.deadline), func() { s.expire(pp) })
	ps.parked.Store(pp)
	if s.repark(pp, changed) {
		s.dispatch([]hub.Parked{pp})
	}
	return nil
}

// repark leaves a parked poll with its machine and watches its connection.
// It says whether the poll is to be answered now instead: its machine
// changed since it looked (changed, from its step), it was superseded, or
// meanwhile the instance began draining or the machine's enrolment was
// revoked (Drain closes drainCh, and a revocation is added to the refused
// set, before the parked polls are taken: either they took this one or
// this sees it).
func (s *Server) repark(pp *parkedPoll, changed <-chan struct{}) (now bool) {
	parked := s.Hub.Park(pp, changed)
	pp.watched.Store(s.watch.arm(pp))
	if !parked || pp.isSuperseded() || s.Draining() || pp.revoked() {
		s.Hub.Unpark(pp)
		return true
	}
	return false
}

// peerGone ends a parked poll whose host closed its end: no send, no
// bytes, its descriptor released now.
func (s *Server) peerGone(pp *parkedPoll) {
	if !pp.state.CompareAndSwap(parkedWaiting, parkedDone) {
		pp.left.Store(true) // a worker has it: it reads this before it sends
		return
	}
	s.Hub.Unpark(pp)
	s.finishParked(pp, nil)
}

// expire answers a parked poll whose wait passed with 304.
func (s *Server) expire(pp *parkedPoll) {
	if !pp.state.CompareAndSwap(parkedWaiting, parkedDone) {
		return // a worker has it; it checks the deadline itself
	}
	s.Hub.Unpark(pp)
	if pp.revoked() {
		// Refused since it parked, and not closed then (a revocation this
		// instance learnt by reading the store, not by notification).
		s.finishParked(pp, goneResponse())
		return
	}
	s.finishParked(pp, notModified())
}

// Machine is the machine a parked poll waits on (hub.Parked).
func (pp *parkedPoll) Machine() int64 { return pp.machine }

// dispatch hands woken parked polls to the workers.
func (s *Server) dispatch(ps []hub.Parked) {
	for _, p := range ps {
		pp := p.(*parkedPoll)
		if pp.state.CompareAndSwap(parkedWaiting, parkedHandling) {
			s.toWorker(pp)
		}
	}
}

// claim takes the parked polls of a fan-out's chunk that its composing
// goroutine may answer (hub.Claim): waiting, watched (the watch's event,
// not a system call, says their host left), and with nothing else to
// answer first — draining, superseded, revoked or left is answered by a
// worker as before. A claimed poll is the claimer's as a woken one is a
// worker's: its timer and the watch leave it alone.
func (s *Server) claim(ps []hub.Parked) []hub.Claim {
	if s.Draining() {
		return nil
	}
	claims := make([]hub.Claim, 0, len(ps))
	for _, p := range ps {
		pp := p.(*parkedPoll)
		if !pp.watched.Load() || !pp.Sendable() {
			continue
		}
		if pp.state.CompareAndSwap(parkedWaiting, parkedHandling) {
			claims = append(claims, hub.Claim{Poll: pp, Known: pp.known, Batch: pp.batch, Schemas: pp.schemas})
		}
	}
	return claims
}

// Sendable reports whether a claimed poll may still be sent a
// declaration (hub.Sendable).
func (pp *parkedPoll) Sendable() bool {
	return !pp.left.Load() && !pp.isSuperseded() && !pp.revoked() && !pp.srv.Draining()
}

// answerClaims answers claimed polls once composing has committed: those
// with a send row (written in the declarations' transaction) get their
// 200 here, on the composing goroutine, with no second transaction and no
// hand-off; the rest go to a worker, as woken polls do.
func (s *Server) answerClaims(claims []hub.Claim) {
	var rows []models.Send
	for _, cl := range claims {
		if cl.Send != nil {
			rows = append(rows, *cl.Send)
		}
	}
	s.Sends.count(rows)
	for _, cl := range claims {
		pp := cl.Poll.(*parkedPoll)
		// Whatever happened between the commit and now is answered as a
		// worker would; the send row stays on the record, its bytes never
		// sent, which is harmless (the reverse would not be).
		switch {
		case cl.Send == nil:
			s.toWorker(pp)
		case pp.left.Load():
			s.finishParked(pp, nil) // the host went away
		case pp.revoked():
			s.finishParked(pp, goneResponse())
		case s.Draining():
			s.finishParked(pp, draining())
		case pp.isSuperseded():
			s.finishParked(pp, notModified()) // a newer poll of its machine is answered instead
		default:
			// Its host's next polls name this send as the one it finished.
			s.Hub.NoteFinishedSend(pp.machine, cl.Composed.Generation, cl.Send.ID)
			a := sendAnswer(cl.Composed, cl.Send.ID, cl.Composed.EnvelopeFor(pp.batch))
			if len(a.body) > smallAnswer {
				go s.finishParked(pp, a) // its write may wait for the network
				continue
			}
			s.finishParked(pp, a)
		}
	}
}

// toWorker hands a parked poll to the workers. When they are behind (each
// answer's write is bounded, but hosts that do not read can take a worker
// for that bound each), the poll gets a goroutine of its own rather than
// holding the caller — the hub's composing goroutine, or a handler.
func (s *Server) toWorker(pp *parkedPoll) {
	select {
	case s.parkedCh <- pp:
	default:
		go s.answerParked(pp)
	}
}

// parkedWorker answers woken parked polls: the same rules as a poll that
// waits in place.
func (s *Server) parkedWorker() {
	for pp := range s.parkedCh {
		s.answerParked(pp)
	}
}

func (s *Server) answerParked(pp *parkedPoll) {
	// A poll to be answered again at once is answered by this worker: a
	// worker that queued it would wait on the queue the workers drain.
	for s.answerOnce(pp) && pp.state.CompareAndSwap(parkedWaiting, parkedHandling) {
	}
}

// answerOnce answers a woken parked poll or parks it again; true when it
// is to be answered again at once (see repark).
func (s *Server) answerOnce(pp *parkedPoll) (again bool) {
	// A watched connection's departure is the watch's event (left, or
	// the poll already finished); looking at the socket too cost a system
	// call per answer, ~9 µs of a fan-out's ~150 µs a machine.
	if pp.left.Load() || !pp.watched.Load() && !peerOpen(pp.conn) {
		// The host went away while parked: no send, no bytes.
		s.finishParked(pp, nil)
		return
	}
	ctx := s.runCtx
	st, err := pp.next(ctx)
	if err != nil {
		// The store failed this time; the poll waits on and is answered
		// by the next change (the step's channel is from before the
		// store was asked) or its deadline.
		s.Log.Error("parked poll", "machine", pp.name, "err", err)
		st.verdict = pollWait
		if !time.Now().Before(pp.deadline) {
			st.verdict = pollNotModified
		}
	}
	switch st.verdict {
	case pollDraining:
		s.finishParked(pp, draining())
	case pollGone:
		s.finishParked(pp, goneResponse())
	case pollNotModified:
		s.finishParked(pp, notModified())
	case pollSend:
		body, err := pp.envelope(ctx, st.comp)
		if err != nil {
			s.Log.Error("parked poll: envelope", "machine", pp.name, "err", err)
			s.finishParked(pp, &answer{status: http.StatusInternalServerError})
			return
		}
		sendID, err := pp.recordSend(ctx, st.comp)
		switch {
		case errors.Is(err, models.ErrUnauthorized):
			s.finishParked(pp, goneResponse()) // revoked meanwhile
			return
		case errors.Is(err, errSuperseded):
			s.finishParked(pp, notModified())
			return
		case errors.Is(err, models.ErrDraining):
			s.finishParked(pp, draining())
			return
		case err == nil && pp.left.Load():
			s.finishParked(pp, nil) // the host went away
			return
		}
		if err != nil {
			s.Log.Error("parked poll: send row", "machine", pp.name, "err", err)
			s.finishParked(pp, &answer{status: http.StatusInternalServerError})
			return
		}
		s.finishParked(pp, sendAnswer(st.comp, sendID, body))
	case pollWait:
		pp.state.Store(parkedWaiting)
		if s.repark(pp, st.changed) {
			return true
		}
		if pp.state.Load() == parkedDone {
			// Its timer answered it between the two lines above (the
			// watch refuses a finished poll, so the connection stays the
			// kept listener's): not left in the hub's list either.
			s.Hub.Unpark(pp)
			return false
		}
		// The timer may have fired while this worker held the poll.
		if !time.Now().Before(pp.deadline) {
			s.expire(pp)
		}
	}
	return false
}

// Writing an answer is bounded: a host that does not take it in time is
// cut off (its connection closed) rather than holding the goroutine that
// writes it — a worker, or the goroutine composing a fan-out's chunk,
// which the rest of the chunk waits on. A host that read its last answer
// before asking again has an empty socket send buffer (16 KiB to start on
// Linux), which takes a small answer at once: a 304, a 503, a 401 and
// most 200s. One that stopped reading (or pipelined requests it never read
// the answers of) has filled it. A larger answer may wait for the network.
const (
	smallAnswer      = 8 << 10
	smallAnswerWrite = 50 * time.Millisecond
	largeAnswerWrite = 30 * time.Second
)

// writeAnswer writes b to c within d, then lifts the deadline for the
// connection's next request. A plain connection first gives b to its
// socket in one write system call, with no deadline: an answer the socket
// takes whole — nearly every answer of a fan-out — cannot wait, and
// setting and lifting the deadline were two timer updates, ~2 µs of each
// answer. Only what the socket did not take waits, bounded by d.
func writeAnswer(c net.Conn, b []byte, d time.Duration) error {
	if conns.Transport(c) == c {
		if rc, ok := conns.RawConn(c); ok {
			n, err := writeNow(rc, b)
			if err != nil {
				return err
			}
			if n == len(b) {
				return nil
			}
			b = b[n:]
		}
	}
	if err := c.SetWriteDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	if _, err := c.Write(b); err != nil {
		return err
	}
	return c.SetWriteDeadline(time.Time{})
}

// writeNow writes what of b the socket takes at once, without waiting:
// n is 0 when its buffer is full. Anything the poller refuses (a deadline
// left on the connection) is left to the bounded write, which sets its
// own.
func writeNow(rc syscall.RawConn, b []byte) (n int, err error) {
	_ = rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			k, werr := syscall.Write(int(fd), b[n:])
			if werr == syscall.EINTR {
				continue
			}
			if werr == syscall.EAGAIN {
				return true
			}
			if werr != nil {
				err = werr
				return true
			}
			n += k
		}
		return true
	})
	return n, err
}

// finishParked writes the answer (nil: no bytes), gives the connection
// back to the server or closes it, and ends the poll.
func (s *Server) finishParked(pp *parkedPoll, a *answer) {
	pp.state.Store(parkedDone)
	pp.timer.Stop()
	s.watch.forget(pp)
	keep := pp.keep && a.keepable() && !s.Draining()
	if a != nil {
		var extra [2][2]string
		conn := extra[:0]
		if pp.tlsHint != "" {
			conn = append(conn, [2]string{HeaderTLS, pp.tlsHint})
		}
		if !keep {
			conn = append(conn, [2]string{"Connection", "close"})
		}
		buf := answerBufs.Get().(*[]byte)
		*buf = a.appendTo((*buf)[:0], conn)
		within := smallAnswerWrite
		if len(*buf) > smallAnswer {
			within = largeAnswerWrite
		}
		err := writeAnswer(pp.conn, *buf, within)
		if cap(*buf) <= maxPooledAnswer {
			answerBufs.Put(buf)
		}
		if err != nil {
			// A host that does not take its answer: its socket is closed
			// now, without TLS's close_notify — a write it would not take
			// either, which Go's TLS gives 5 s.
			_ = conns.Transport(pp.conn).Close()
			s.Hub.PollEnded(pp.machine, pp.pollSession)
			return
		}
	}
	fd := int32(-1)
	if pp.hasFD {
		fd = pp.fd
	}
	if keep && s.Kept.GiveFD(pp.conn, fd) {
		s.Hub.PollEnded(pp.machine, pp.pollSession)
		return
	}
	// On loopback and on a busy box, closing costs about what writing the
	// answer does; in a fan-out the next answers go first. The host has
	// its answer (Content-Length says where it ends) and does not wait for
	// the close.
	select {
	case s.closeCh <- pp.conn:
	default:
		// The closer is behind (a TLS close can wait 5 s on a host that
		// stopped reading): not on this goroutine, which a fan-out's
		// other answers may wait on.
		go pp.conn.Close()
	}
	s.Hub.PollEnded(pp.machine, pp.pollSession)
}

// peerOpen reports whether the host still holds its end: a parked
// connection has nothing to read, so anything readable (an end of file,
// an error, stray bytes) means the host is gone or misbehaving. It peeks
// without blocking: no deadline, no timer.
func peerOpen(c net.Conn) bool {
	rc, ok := conns.RawConn(c)
	if !ok {
		return true
	}
	open := true
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && errors.Is(err, syscall.EAGAIN)
		return true // never wait
	})
	return open
}

// answer is a parked poll's response before it is bytes: finishParked
// adds the headers its connection needs and writes it in one piece. A
// fan-out builds one per machine, so it is appended into one buffer, with
// the Date header formatted once a second (fmt and a copy per added
// header were ~7 µs of an answer).
type answer struct {
	status  int
	headers [][2]string
	body    []byte
}

// answerBufs holds the buffers answers are written from: the socket has
// the bytes once Write returns, and a fan-out writes one answer a machine.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxPooledAnswer is the largest buffer kept for the next answer.
const maxPooledAnswer = 64 << 10

// appendTo appends the answer as HTTP/1.1, with the connection's headers, to b.
func (a *answer) appendTo(b []byte, conn [][2]string) []byte {
	size := 96 + len(a.body)
	for _, hs := range [][][2]string{a.headers, conn} {
		for _, h := range hs {
			size += len(h[0]) + len(h[1]) + 4
		}
	}
	b = slices.Grow(b, size)
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(a.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(a.status)...)
	b = append(b, "\r\n"...)
	for _, hs := range [][][2]string{a.headers, conn} {
		for _, h := range hs {
			b = append(append(append(append(b, h[0]...), ": "...), h[1]...), "\r\n"...)
		}
	}
	b = append(append(append(b, "Date: "...), httpDate()...), "\r\n"...)
	if a.status != http.StatusNotModified {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(a.body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, a.body...)
}

// keepable: the answers after which a connection serves the next poll.
func (a *answer) keepable() bool {
	return a != nil && (a.status == http.StatusOK || a.status == http.StatusNotModified)
}

// date is the Date header of the second it was made.
type date struct {
	unix int64
	text string
}

var lastDate atomic.Pointer[date]

// httpDate is now in HTTP's date format, formatted once a second.
func httpDate() string {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.unix == now.Unix() {
		return d.text
	}
	d := &date{unix: now.Unix(), text: now.UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.text
}

// renewalDue reports whether the machine certificate a connection
// presented is past two thirds of its lifetime, when its host renews it: a
// renewed certificate is presented only on a new handshake, so that
// connection is not kept.
func renewalDue(cs *tls.ConnectionState, now time.Time) bool {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return false
	}
	c := cs.PeerCertificates[0]
	return now.After(c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3))
}

func notModified() *answer { return &answer{status: http.StatusNotModified} }

func draining() *answer {
	body, _ := json.Marshal(problemOf(models.ErrDraining))
	return &answer{status: http.StatusServiceUnavailable, body: body,
		headers: [][2]string{{"Content-Type", "application/problem+json"}, {"Retry-After", "0"}}}
}
