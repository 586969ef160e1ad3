package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"mesh/hub"
	"mesh/models"
)

// A pollSession is one long poll of one machine. Its next method is the
// one rule ladder every poll follows — draining → gone → conflict check →
// "newer than the host knows and nothing newer queued" → deadline — for a
// poll held in its goroutine and for a parked one alike; the two differ
// only in how they wait and how they write their answer (nomad's one
// blocking query for every blocking endpoint).
type pollSession struct {
	srv     *Server
	machine int64
	name    string
	// enrolment is the host's enrolment (token id): a poll whose
	// enrolment is revoked while it waits is answered 401.
	enrolment string
	known     int64 // the generation the host finished with
	// finishedSend is the send by which it received known
	// (models.HeaderFinishedSend), "" when its host did not say.
	finishedSend string
	deadline     time.Time
	checked      bool // the store was asked about a conflict once
	batch        bool // the host verifies batch envelopes (X-Mesh-Envelope)
	// schemas are what the poll advertised (X-Mesh-Schema), hostVersion
	// its X-Mesh-Host-Version: a declaration in a schema the poll did not
	// advertise is never sent to it (see next).
	schemas     models.Schemas
	hostVersion string

	// superseded is closed when a newer poll of the same machine arrives:
	// a machine has one waiting poll, and the older is answered 304.
	superseded    chan struct{}
	supersedeOnce sync.Once
	parked        atomic.Pointer[parkedPoll] // set while it waits parked
}

func newPollSession(s *Server, machine int64, name, enrolment string, known int64, deadline time.Time) *pollSession {
	return &pollSession{srv: s, machine: machine, name: name, enrolment: enrolment, known: known, deadline: deadline, superseded: make(chan struct{})}
}

// revoked reports whether the poll's enrolment was revoked (in memory).
func (ps *pollSession) revoked() bool {
	return ps.srv.Auth != nil && ps.srv.Auth.Revoked.Revoked(ps.enrolment)
}

// Supersede answers this poll 304 because a newer one of its machine
// arrived (hub.Poll). A parked poll is handed to a worker at once.
func (ps *pollSession) Supersede() {
	ps.supersedeOnce.Do(func() { close(ps.superseded) })
	if pp := ps.parked.Load(); pp != nil {
		ps.srv.Hub.Unpark(pp)
		ps.srv.dispatch([]hub.Parked{pp})
	}
}

func (ps *pollSession) isSuperseded() bool {
	select {
	case <-ps.superseded:
		return true
	default:
		return false
	}
}

// verdict is what a poll does next.
type verdict int

const (
	pollWait        verdict = iota // nothing to send yet: wait on changed
	pollSend                       // send comp
	pollNotModified                // the wait is over
	pollDraining                   // this instance drains: the host moves on
	pollGone                       // the machine was removed
)

// step is a session's decision.
type step struct {
	verdict verdict
	comp    *models.Composed // pollSend
	changed <-chan struct{}  // pollWait: closed when the machine changes
	judged  bool             // this step asked the store about a conflict
}

// next decides what the poll does now. It touches the store only to
// compose a newer generation, or once per poll to judge a host that knows
// a generation this instance's memory has not seen. When the store fails,
// the step still carries the change channel read before it was asked, for a
// poll that waits on.
func (ps *pollSession) next(ctx context.Context) (step, error) {
	s := ps.srv
	if s.Draining() {
		return step{verdict: pollDraining}, nil
	}
	if ps.isSuperseded() {
		return step{verdict: pollNotModified}, nil
	}
	v := s.Hub.View(ps.machine)
	if v.Gone || ps.revoked() {
		return step{verdict: pollGone}, nil
	}
	judged := false
	// A host at or behind the generation this instance knows, by a send it
	// does not know the store made (the first poll after a start, or a
	// send made elsewhere): a store restored from a backup may have reused
	// the generation for other content, or moved past it on the backup's
	// timeline — either sent would be applied in full over what the lost
	// timeline gave the host. Asked once: a read, then remembered.
	unsure := ps.known <= v.Gen && ps.known > 0 && ps.finishedSend != "" &&
		(v.FinishedGen != ps.known || v.FinishedSend != ps.finishedSend)
	if unsure && !v.Conflict && !ps.checked {
		made, err := s.Store.SendMade(ctx, ps.finishedSend, ps.machine, ps.known)
		if err != nil {
			return step{changed: v.Changed}, err
		}
		if made {
			s.Hub.NoteJudgedSend(ps.machine, ps.known, ps.finishedSend)
			unsure = false
		}
	}
	if (ps.known > v.Gen || unsure) && !v.Conflict && !ps.checked {
		// The host finished a generation this instance has not seen, or
		// one it has by a send the store never made: judged against the
		// store, never this cache.
		ps.checked, judged = true, true
		conflict, gen, err := s.Store.CheckConflict(ctx, ps.machine, ps.known, ps.finishedSend)
		if err != nil {
			return step{changed: v.Changed}, err
		}
		s.Hub.SetHead(ps.machine, gen, conflict)
		if unsure && !conflict {
			// Judged (a conflict resolved for it): not asked again.
			s.Hub.NoteJudgedSend(ps.machine, ps.known, ps.finishedSend)
		}
		v = s.Hub.View(ps.machine)
	}
	// A newer generation queued to compose is waited for: sending the one
	// it supersedes would only make the host apply twice.
	if !v.Conflict && !v.Pending && v.Gen > ps.known {
		comp, err := s.Hub.ComposeOne(ctx, ps.machine, ps.name, v, ps.batch)
		if err != nil {
			return step{changed: v.Changed}, err
		}
		if comp != nil && ps.schemas != nil && !ps.schemas.Has(comp.Schema) {
			// Composed for schemas this poll did not advertise: another
			// instance recorded its host's schemas since this one last
			// heard them (a trial's poll there, rolled back since). The
			// store is told what this host decodes — a new generation,
			// composed for it — and the poll waits for it.
			if err := s.Store.RecordHostInfo(ctx, ps.machine, ps.hostVersion, ps.schemas.String()); err != nil {
				return step{changed: v.Changed}, err
			}
			comp = nil
		}
		if comp != nil {
			return step{verdict: pollSend, comp: comp}, nil
		}
	}
	if !time.Now().Before(ps.deadline) {
		return step{verdict: pollNotModified}, nil
	}
	return step{verdict: pollWait, changed: v.Changed, judged: judged}, nil
}

// envelope is the body a 200 of comp carries for this poll's host: the
// batch envelope when it verifies them, else the single-signature one,
// signed and stored first if no poll needed it yet.
func (ps *pollSession) envelope(ctx context.Context, comp *models.Composed) ([]byte, error) {
	if b := comp.EnvelopeFor(ps.batch); b != nil {
		return b, nil
	}
	c, err := ps.srv.Hub.SingleEnvelope(ctx, comp)
	if err != nil {
		return nil, err
	}
	return c.Envelope, nil
}

// recordSend writes the send row of a declaration to the session's machine
// and returns its id once committed: every send is a row, committed before
// the bytes leave (held and parked polls alike).
func (ps *pollSession) recordSend(ctx context.Context, comp *models.Composed) (string, error) {
	s := ps.srv
	if ps.revoked() {
		// Revoked while its declaration was composed: nothing is sent.
		return "", fmt.Errorf("%w: machine %s was revoked", models.ErrUnauthorized, ps.name)
	}
	send := models.SendOf(comp, s.Instance)
	send.MachineID = ps.machine
	if err := s.Sends.Write(ctx, send); err != nil {
		return "", err
	}
	// What happened while the row committed is answered as the fan-out's
	// claimed polls are (answerClaims): the row stays on the record, its
	// bytes never sent. A machine revoked, or a newer poll of it, during
	// the commit was sent the declaration all the same.
	switch {
	case ps.revoked():
		return "", fmt.Errorf("%w: machine %s was revoked", models.ErrUnauthorized, ps.name)
	case ps.isSuperseded():
		return "", errSuperseded
	case s.Draining():
		return "", models.ErrDraining
	}
	// Its host's next polls will name it as the send it finished with.
	s.Hub.NoteFinishedSend(ps.machine, comp.Generation, send.ID)
	return send.ID, nil
}

// errSuperseded: a newer poll of the machine came while this one's send
// row committed; it is answered instead (304 here).
var errSuperseded = errors.New("a newer poll of the machine is answered instead")

// sendAnswer is a parked poll's 200 carrying comp's envelope.
func sendAnswer(comp *models.Composed, sendID string, envelope []byte) *answer {
	return &answer{status: http.StatusOK, body: envelope, headers: [][2]string{{"Content-Type", "application/json"},
		{"ETag", `"` + strconv.FormatInt(comp.Generation, 10) + `"`}, {HeaderSend, sendID}, {"Cache-Control", "no-store"}}}
}
