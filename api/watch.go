package api

import (
	"context"
	"errors"
	"mesh/conns"
	"sync"

	"golang.org/x/sys/unix"
)

// peerWatch is one readiness watcher over every parked connection: a host
// that closes its end (or sends anything, which a parked poll never
// expects) is noticed within one epoll wait, and its descriptor released —
// not after its wait runs out, and without a goroutine per parked poll. A
// flood of polls whose clients left used to hold their descriptors for
// minutes after the clients closed.
//
// It shares the epoll set and goroutine of the listener that takes
// answered connections back (conns.Kept.Share) when there is one: a
// connection then moves from the watch to the listener by one
// registration replacing the other, and its host's next request wakes
// one goroutine, not two.
type peerWatch struct {
	epfd int               // the watch's own set (kept nil), waited on by run
	kept *conns.Kept       // the listener whose set the watch shares (Share), if any
	gone func(*parkedPoll) // called once per event, from the watcher's goroutine

	mu   sync.Mutex
	byFD map[int32]watched
}

type watched struct {
	seq int32 // tells a registration from a later one of a reused descriptor
	pp  *parkedPoll
}

// newPeerWatch is a watch in kept's epoll set, or in one of its own
// (own: run waits on it) when kept is nil, has none or is closed.
func newPeerWatch(gone func(*parkedPoll), kept *conns.Kept) (*peerWatch, error) {
	w := &peerWatch{epfd: -1, gone: gone, byFD: map[int32]watched{}}
	if kept != nil && kept.Share(w.event) {
		w.kept = kept
		return w, nil
	}
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	w.epfd = fd
	return w, nil
}

// own says whether the watch has a set of its own, for run to wait on.
func (w *peerWatch) own() bool { return w.kept == nil }

// arm watches pp's connection for one event (a parked poll is armed each
// time it is parked; an event disarms it). It reports whether it did.
func (w *peerWatch) arm(pp *parkedPoll) bool {
	if w == nil {
		return false
	}
	if !pp.hasFD {
		return false
	}
	fd := pp.fd
	w.mu.Lock()
	defer w.mu.Unlock()
	if pp.state.Load() == parkedDone {
		// Answered (or its host gone) meanwhile: finishParked marks it
		// done before forget takes mu and closes the connection only
		// after, so its descriptor may since name another connection,
		// whose registration this must not take over.
		return false
	}
	cur, known := w.byFD[fd]
	if !known || cur.pp != pp {
		cur = watched{seq: conns.NextSeq(), pp: pp}
		w.byFD[fd] = cur
	}
	if w.kept != nil {
		// Not once the listener is closed (its set with it).
		return w.kept.Arm(fd, cur.seq) == nil
	}
	return conns.ArmOnce(w.epfd, fd, cur.seq) == nil
}

// forget stops watching pp's connection: its events are no longer
// pp's. The descriptor stays in the epoll set, which costs nothing: a
// closed connection leaves the set with its file, and a kept one is armed
// again by the listener it is given back to (the same set: Share), or in
// a set of its own reports at most one event (its host's next request),
// which no entry claims, before its next park arms it again with
// EPOLL_CTL_MOD. Removing it here was a system call on every answer of a
// fan-out (~7 µs of ~150 a machine).
func (w *peerWatch) forget(pp *parkedPoll) {
	if w == nil {
		return
	}
	if !pp.hasFD {
		return
	}
	fd := pp.fd
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, known := w.byFD[fd]; known && cur.pp == pp {
		delete(w.byFD, fd)
	}
}

// run waits for events until ctx ends.
func (w *peerWatch) run(ctx context.Context) {
	events := make([]unix.EpollEvent, 256)
	for ctx.Err() == nil {
		n, err := unix.EpollWait(w.epfd, events, 500)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		for _, ev := range events[:max(n, 0)] {
			w.event(ev.Fd, ev.Pad)
		}
	}
	_ = unix.Close(w.epfd)
}

// event is an event of registration seq of descriptor fd: the parked
// poll it was armed for, if it still is, has a host that left.
func (w *peerWatch) event(fd, seq int32) {
	w.mu.Lock()
	cur, known := w.byFD[fd]
	w.mu.Unlock()
	if known && cur.seq == seq {
		w.gone(cur.pp)
	}
}
