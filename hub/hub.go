// Package hub is a controller instance's memory of every machine for the
// long poll: its generation, whether it is in conflict, what its host last
// said, the polls parked on it, and a channel closed when any of that
// changes. It composes bumped machines ahead of their polls and records
// why a generation cannot be composed, in one place. It knows nothing of
// HTTP: a parked poll is any value that names its machine.
package hub

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"mesh/models"
	"mesh/store"
)

// Parked is a poll waiting without a goroutine (api's hijacked
// connection); the hub keeps it with its machine and hands it to Dispatch
// when the machine changes.
type Parked interface {
	Machine() int64
}

// A Claim is a parked poll that the goroutine composing its machine's
// declaration answers: its send row is written in the transaction that
// stores the declaration, and its bytes leave once that has committed.
type Claim struct {
	Poll  Parked
	Known int64 // the generation its host finished with
	Batch bool  // its host verifies batch envelopes
	// Schemas are what its poll advertised (nil: not known): a
	// declaration in another schema is left to a worker (the poll path
	// tells the store what the host decodes).
	Schemas models.Schemas
	// Send is its send row, committed with the declaration; nil when
	// it was not sent so (its answer is decided as any woken poll's).
	Send *models.Send
	// Composed is the declaration sent.
	Composed *models.Composed
}

// Sendable is a claimed poll that says whether it may still be sent a
// declaration (its host still there, no newer poll of its machine, its
// enrolment not revoked, the instance not draining): composing asks it in
// the transaction that would write its send row.
type Sendable interface {
	Sendable() bool
}

// Poll is a poll waiting on a machine; a newer poll from the same machine
// supersedes it (a host holds one poll at a time: more are an attacker's,
// or a host that lost track of its own).
type Poll interface {
	Supersede()
}

// Hub is the controller's memory of every machine for the long poll: its
// generation, whether it is in conflict, what its host last said, and a
// channel closed when any of that changes. A poll that finds nothing new
// waits here and never touches the store.
type Hub struct {
	Store    *store.Store
	Signer   models.Signer
	Instance string
	Log      *slog.Logger

	mu     sync.Mutex
	byName map[string]*machineEntry
	byID   map[int64]*machineEntry
	ready  bool

	polls  atomic.Int64 // polls held open now
	heard  atomic.Int64 // bumps heard, in process and from the store's notifications
	ahead  atomic.Int64 // machines composed ahead of their polls and woken
	onPoll atomic.Int64 // single-signature envelopes signed on a poll's first need
	// withDecl: sends whose rows were written with their declarations,
	// their polls answered by the goroutine that composed them.
	withDecl atomic.Int64
	// singleForAll: an instance of a build that knows no batch envelopes
	// serves from this store (a rolling upgrade), and sends the stored
	// single-signature envelope as it is — so every declaration composed
	// here is signed with one too.
	singleForAll atomic.Bool
	draining     bool // the run loop is composing and waking bumped machines
	stopped      bool // the instance drains: compose nothing more

	// Dispatch answers woken parked polls (set by the API server).
	Dispatch func([]Parked)
	// Claim and Answer let the goroutine that composes a fan-out's chunk
	// answer its parked polls itself (set by the API server; without them
	// every woken poll goes to Dispatch). Claim takes the polls that may
	// be answered so (no other goroutine will touch them); composing
	// writes their send rows in the declarations' transaction; Answer
	// then writes each claim's answer — those without a send row are
	// answered as Dispatch would.
	Claim  func([]Parked) []Claim
	Answer func([]Claim)

	pending map[int64]int64 // bumps not yet composed and woken
	// unknownGen holds bumps heard for machines this instance does not
	// know yet (enrolled on another instance since its last load): a
	// request that learns the machine from the store may have read it
	// before the bump, and Add takes the newer of the two.
	unknownGen map[int64]int64
	pendingCh  chan struct{}
	seen       map[int64]bool
}

type machineEntry struct {
	known       time.Time // when this hub learnt of it
	id          int64
	name        string
	gen         int64
	conflict    bool
	hostVersion string
	schema      string
	tokenID     string
	certInUse   string // the serial of the certificate its host presents, as this instance knows it
	lastSeen    time.Time
	polledHere  time.Time // when its host last polled this instance
	// finishedGen and finishedSend are a send to it this instance knows
	// the store made (it wrote it, a report named it, or the store said
	// so): a poll that names it as the send its host finished with is
	// judged once, not every time.
	finishedGen  int64
	finishedSend string
	// single: its host's last poll here did not send X-Mesh-Envelope:
	// batch, so composing ahead signs its single-signature envelope too
	// rather than leaving it to a write on the poll path.
	single     bool
	polls      int
	current    Poll // the newest poll of this machine; older ones are superseded
	changed    chan struct{}
	composed   *models.Composed
	composeErr int64 // the generation whose compose failure was recorded
	queued     int64 // the newest generation queued to compose and wake
	parked     []Parked
}

// wake closes the entry's change channel and takes its parked polls (to be
// dispatched once the hub's lock is released). Call with h.mu held.
func (e *machineEntry) wake() []Parked {
	close(e.changed)
	e.changed = make(chan struct{})
	ps := e.parked
	e.parked = nil
	return ps
}

func (h *Hub) send(ps []Parked) {
	if len(ps) > 0 && h.Dispatch != nil {
		h.Dispatch(ps)
	}
}

// Park leaves a poll with its machine and says whether it did. changed is
// the machine's change channel as the poll saw it when it decided to wait
// (View): a change since then woke the polls parked at that moment, not
// this one, so it is not parked, and the caller answers it at once, as when
// the machine is gone.
func (h *Hub) Park(pp Parked, changed <-chan struct{}) bool {
	h.mu.Lock()
	e := h.byID[pp.Machine()]
	now := e == nil || (<-chan struct{})(e.changed) != changed
	if !now {
		e.parked = append(e.parked, pp)
	}
	h.mu.Unlock()
	return !now
}

// Unpark removes a poll from its machine.
func (h *Hub) Unpark(pp Parked) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byID[pp.Machine()]; e != nil {
		for i, q := range e.parked {
			if q == pp {
				e.parked = append(e.parked[:i], e.parked[i+1:]...)
				break
			}
		}
	}
}

// ParkedOn reports whether a poll of the machine named is parked.
func (h *Hub) ParkedOn(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byName[name]
	return e != nil && len(e.parked) > 0
}

// AllParked takes every parked poll (a draining instance answers them all).
func (h *Hub) AllParked() []Parked {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ps []Parked
	for _, e := range h.byID {
		ps = append(ps, e.parked...)
		e.parked = nil
	}
	return ps
}

// wakeChunk is how many polls are woken at once: when all waiters wake
// together the send writer queues behind them for the CPU; in chunks, the
// first answers leave in milliseconds.
const wakeChunk = 500

// New makes an empty hub; Load fills it.
func New(st *store.Store, signer models.Signer, instance string, log *slog.Logger) *Hub {
	return &Hub{Store: st, Signer: signer, Instance: instance, Log: log,
		byName: map[string]*machineEntry{}, byID: map[int64]*machineEntry{},
		pending: map[int64]int64{}, unknownGen: map[int64]int64{}, pendingCh: make(chan struct{}, 1), seen: map[int64]bool{}}
}

// Load reads every machine's head from the store. Polls are answered only
// once it has run.
func (h *Hub) Load(ctx context.Context) error {
	readAt := time.Now()
	heads, err := h.Store.MachineHeads(ctx)
	if err != nil {
		return err
	}
	h.loadHeads(heads)
	h.forgetMissing(heads, readAt)
	return nil
}

// forgetMissing forgets the machines known since before the store was
// read (readAt) that it no longer has: one deleted through another
// instance stayed in this hub, and its count, until a restart. One added
// since the read began is kept (its enrolment committed after it).
func (h *Hub) forgetMissing(heads []store.MachineHead, readAt time.Time) {
	in := make(map[int64]bool, len(heads))
	for _, m := range heads {
		in[m.ID] = true
	}
	var ps []Parked
	h.mu.Lock()
	for id, e := range h.byID {
		if in[id] || !e.known.Before(readAt) {
			continue
		}
		delete(h.byID, id)
		if h.byName[e.name] == e {
			delete(h.byName, e.name)
		}
		ps = append(ps, e.wake()...)
	}
	h.mu.Unlock()
	h.send(ps)
}

// loadHeads takes in what the store said of every machine. The read came
// before the hub's lock: a bump composed and woken meanwhile (in process,
// or heard from another instance) is newer than it, so a generation never
// goes back — a machine set back below the generation queued for it would
// hold its polls for a wake that already came, until the next resync —
// and a read older than what the hub knows says nothing of its conflict.
func (h *Hub) loadHeads(heads []store.MachineHead) {
	var ps []Parked
	h.mu.Lock()
	for _, m := range heads {
		e := h.byID[m.ID]
		if e == nil {
			// A bump heard while it was unknown may be newer than the read.
			e = &machineEntry{known: time.Now(), id: m.ID, name: m.Name, gen: h.unknownGen[m.ID], changed: make(chan struct{})}
			delete(h.unknownGen, m.ID)
			h.byID[m.ID], h.byName[m.Name] = e, e
		}
		conflict := e.conflict
		if m.Generation >= e.gen {
			conflict = m.Conflict
		}
		changed := m.Generation > e.gen || e.conflict != conflict
		e.gen, e.conflict = max(e.gen, m.Generation), conflict
		e.hostVersion, e.schema, e.tokenID = m.HostVersion, m.Schema, m.TokenID
		if m.CertInUse != "" {
			e.certInUse = m.CertInUse
		}
		if m.LastSeen != nil && m.LastSeen.After(e.lastSeen) {
			e.lastSeen = *m.LastSeen
		}
		if changed {
			ps = append(ps, e.wake()...)
		}
	}
	h.ready = true
	h.mu.Unlock()
	h.send(ps)
}

// Ready reports whether the hub has loaded the store.
func (h *Hub) Ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready
}

// Add puts a newly enrolled machine in the hub.
func (h *Hub) Add(m *models.Machine) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byID[m.ID]; e != nil {
		// Learnt meanwhile (two first requests at once, or a resync): the
		// entry stays, with the polls parked on it.
		e.gen = max(e.gen, m.Generation)
		h.byName[m.Name] = e
		return
	}
	// The store was read before the hub's lock: a bump heard since (still
	// pending, or drained while the machine was unknown here) is newer,
	// and taken, so the machine's first poll is not parked on a
	// generation already past until the next resync.
	gen := max(m.Generation, h.pending[m.ID], h.unknownGen[m.ID])
	delete(h.unknownGen, m.ID)
	// Enrolled, not yet polled: no last-seen time (the overview says
	// "never polled"); its first poll is expected here.
	e := &machineEntry{known: time.Now(), id: m.ID, name: m.Name, gen: gen, hostVersion: m.HostVersion,
		schema: m.Schema, tokenID: m.TokenID, certInUse: m.CertInUse, changed: make(chan struct{}), polledHere: time.Now()}
	h.byID[m.ID], h.byName[m.Name] = e, e
}

// Remove forgets a deleted machine; its polls wake and its token stops working.
func (h *Hub) Remove(name string) {
	var ps []Parked
	h.mu.Lock()
	if e := h.byName[name]; e != nil {
		delete(h.byName, name)
		delete(h.byID, e.id)
		ps = e.wake()
	}
	h.mu.Unlock()
	h.send(ps)
}

// TakeParkedOf takes the parked polls of the machine whose enrolment
// (token id) is id: its identity was revoked, and they are to be closed.
func (h *Hub) TakeParkedOf(id string) []Parked {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.byID {
		if e.tokenID == id {
			ps := e.parked
			e.parked = nil
			return ps
		}
	}
	return nil
}

// Authorize checks a host token's machine and token id against memory.
func (h *Hub) Authorize(name, tokenID string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byName[name]
	if e == nil || e.tokenID != tokenID {
		return 0, false
	}
	return e.id, true
}

// CertInUse is the serial of the certificate machine id's host presents,
// as this instance knows it: a request presenting it needs no store.
func (h *Hub) CertInUse(id int64) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byID[id]; e != nil {
		return e.certInUse
	}
	return ""
}

// SetCertInUse remembers the certificate machine id's host presents.
func (h *Hub) SetCertInUse(id int64, serial string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byID[id]; e != nil {
		e.certInUse = serial
	}
}

// LastSeen is when a machine's host last polled (or polls now).
func (h *Hub) LastSeen(id int64) *time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byID[id]
	if e == nil || e.lastSeen.IsZero() {
		return nil
	}
	t := e.lastSeen
	if e.polls > 0 {
		t = time.Now()
	}
	return &t
}

// Bumped is called after a transaction that bumped generations commits. It
// queues the machines; the run loop composes them in batches and wakes
// their polls chunk by chunk.
func (h *Hub) Bumped(bs []models.Bump) {
	h.heard.Add(int64(len(bs)))
	h.mu.Lock()
	n := 0
	for _, b := range bs {
		if e := h.byID[b.MachineID]; e != nil {
			// A bump heard twice (in process, then from the store's
			// notification) is composed and woken once.
			if b.Generation <= max(e.gen, e.queued) {
				continue
			}
			e.queued = b.Generation
		}
		if b.Generation > h.pending[b.MachineID] {
			h.pending[b.MachineID] = b.Generation
			n++
		}
	}
	h.mu.Unlock()
	if n == 0 {
		return
	}
	select {
	case h.pendingCh <- struct{}{}:
	default:
	}
}

// Run composes and wakes bumped machines, flushes last-seen times every
// flushEvery and, when resyncEvery > 0, re-reads every machine's generation
// (a missed notification is caught within that period), until ctx ends.
func (h *Hub) Run(ctx context.Context, flushEvery, resyncEvery time.Duration) {
	flush := time.NewTicker(flushEvery)
	defer flush.Stop()
	var resync <-chan time.Time
	if resyncEvery > 0 {
		t := time.NewTicker(resyncEvery)
		defer t.Stop()
		resync = t.C
	}
	for {
		select {
		case <-ctx.Done():
			h.flushSeen(context.Background())
			return
		case <-resync:
			if err := h.Load(ctx); err != nil && ctx.Err() == nil {
				h.Log.Warn("resync", "err", err)
			}
		case <-flush.C:
			h.flushSeen(ctx)
		case <-h.pendingCh:
			h.drain(ctx)
		}
	}
}

func (h *Hub) drain(ctx context.Context) {
	h.mu.Lock()
	if h.stopped {
		// A draining instance composes nothing; its polls are answered 503.
		h.pending = map[int64]int64{}
		h.mu.Unlock()
		return
	}
	p := h.pending
	h.pending = map[int64]int64{}
	h.draining = len(p) > 0
	// Composed ahead: the machines whose hosts poll here (or did lately,
	// and are applying or between polls). A host that polls another
	// instance is composed for there; one that comes here later composes
	// (or finds) its declaration when it asks.
	ids := make([]int64, 0, len(p))
	now := time.Now()
	for id, gen := range p {
		e := h.byID[id]
		if e == nil {
			h.unknownGen[id] = max(h.unknownGen[id], gen)
			continue
		}
		if e.polls == 0 && now.Sub(e.polledHere) > composeAheadAfter {
			e.gen = max(e.gen, gen) // no poll to wake here
			continue
		}
		ids = append(ids, id)
	}
	h.mu.Unlock()
	// Chunks of neighbouring ids: a chunk's declarations and send rows
	// then land in a few pages of each (machine, …) index rather than one
	// page a row all over it, and every page a write dirties is written
	// again at its commit.
	slices.Sort(ids)
	if len(ids) >= wakeChunk {
		defer gc.begin()() // see collector
	}
	defer func() {
		h.mu.Lock()
		h.draining = false
		h.mu.Unlock()
	}()
	chunks := make(chan []int64)
	go func() {
		defer close(chunks)
		for len(ids) > 0 {
			k := min(wakeChunk, len(ids))
			chunks <- ids[:k]
			ids = ids[k:]
		}
	}()
	// Chunks compose side by side: one reads and signs while another's
	// insert commits, and the send rows of polls already woken commit
	// between them.
	var wg sync.WaitGroup
	for range composers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for chunk := range chunks {
				h.composeAndWake(ctx, chunk, p)
			}
		}()
	}
	wg.Wait()
}

// composeAheadAfter is how long after its host's last poll here a machine
// is still composed ahead: longer than a poll's longest wait (300 s) plus
// an apply.
const composeAheadAfter = 10 * time.Minute

// composers is how many chunks of a fan-out compose at once.
const composers = 4

// composeAndWake composes a chunk of bumped machines ahead of their polls,
// so a woken poll finds its declaration ready, then wakes them. A failure
// here is not fatal: each poll composes on its own.
func (h *Hub) composeAndWake(ctx context.Context, chunk []int64, bumped map[int64]int64) {
	single := map[int64]bool{}
	all := h.singleForAll.Load()
	var parked []Parked
	h.mu.Lock()
	for _, id := range chunk {
		e := h.byID[id]
		if all || e != nil && e.single {
			single[id] = true
		}
		if e != nil && !e.conflict {
			parked = append(parked, e.parked...)
		}
	}
	h.mu.Unlock()
	var claims []Claim
	if h.Claim != nil && len(parked) > 0 {
		claims = h.Claim(parked)
	}
	composed, fails, err := h.Store.ComposeAndSend(ctx, chunk, h.Instance, h.Signer, single, h.sendsFor(claims, bumped))
	h.ahead.Add(int64(len(chunk)))
	if err != nil {
		h.Log.Warn("composing woken machines", "err", err, "machines", len(chunk))
		for i := range claims {
			claims[i].Send = nil // not committed: answered as any woken poll
		}
	}
	var ps []Parked
	var failed []models.ComposeFailure
	h.mu.Lock()
	for _, id := range chunk {
		e := h.byID[id]
		if e == nil {
			continue
		}
		// Why a generation cannot be composed is recorded once, here,
		// before any host asks for it (a conflict is recorded as one).
		var ferr *models.ComposeError
		if errors.As(fails[id], &ferr) && !errors.Is(ferr, models.ErrMachineConflict) && e.newComposeFailure(ferr.Generation) {
			failed = append(failed, models.ComposeFailure{MachineID: id, Machine: e.name, Generation: ferr.Generation, Reason: ferr.Error()})
		}
		if c := composed[id]; c != nil && c.Generation >= e.gen {
			// The store's word: the generation just composed from it, and
			// no conflict (a machine in conflict is never composed) — an
			// admin may have resolved one through another instance.
			e.gen, e.composed, e.conflict = c.Generation, c, false
		}
		if bumped[id] > e.gen {
			// Not composed (a failure): its polls compose it themselves
			// and are no longer held for it.
			e.gen = bumped[id]
		}
		ps = append(ps, e.wake()...)
	}
	h.mu.Unlock()
	// The claimed polls are among those woken; Dispatch passes them by,
	// as a worker's own, and Answer answers them.
	h.send(ps)
	if len(claims) > 0 {
		for _, cl := range claims {
			if cl.Send != nil {
				h.withDecl.Add(1)
			}
		}
		h.Answer(claims)
	}
	h.recordFailures(ctx, failed)
}

// sendsFor makes the send rows of claims whose declaration a chunk
// composed, in its write transaction (store.SendsFor): the rule of a poll
// answered one by one (pollSession.next) — the machine there and not in
// conflict, the declaration newer than the host finished with, no newer
// one queued (its wake will come, and sending this one would only make the
// host apply twice), the envelope its host verifies already signed, the
// poll not overtaken (Sendable) — and nothing else.
func (h *Hub) sendsFor(claims []Claim, bumped map[int64]int64) store.SendsFor {
	if len(claims) == 0 {
		return nil
	}
	return func(chunk []int64, composed func(int64) *models.Composed) []models.Send {
		in := make(map[int64]bool, len(chunk))
		for _, id := range chunk {
			in[id] = true
		}
		var rows []models.Send
		h.mu.Lock()
		defer h.mu.Unlock()
		for i := range claims {
			cl := &claims[i]
			id := cl.Poll.Machine()
			if !in[id] {
				continue
			}
			cl.Send, cl.Composed = nil, nil
			c, e := composed(id), h.byID[id]
			if c == nil || e == nil || e.conflict || c.Generation <= cl.Known || max(e.queued, bumped[id]) > c.Generation ||
				c.EnvelopeFor(cl.Batch) == nil || cl.Schemas != nil && !cl.Schemas.Has(c.Schema) {
				continue
			}
			if p, ok := cl.Poll.(Sendable); ok && !p.Sendable() {
				continue // superseded, revoked or gone meanwhile: answered as any woken poll
			}
			snd := models.SendOf(c, h.Instance)
			cl.Send, cl.Composed = &snd, c
			rows = append(rows, snd)
		}
		return rows
	}
}

// ComposeOne is the declaration of one machine's generation for a poll:
// the one composed ahead, or composed now (with its single-signature
// envelope when the poll's host does not verify batches). It is nil when there is nothing
// the controller may send (a conflict, or a compose failure, recorded once).
func (h *Hub) ComposeOne(ctx context.Context, id int64, name string, v View, batch bool) (*models.Composed, error) {
	if c := v.Composed; c != nil && c.Generation >= v.Gen {
		return c, nil
	}
	got, fails, err := h.Store.ComposeFor(ctx, []int64{id}, h.Instance, h.Signer, map[int64]bool{id: !batch || h.singleForAll.Load()})
	if err != nil {
		return nil, err
	}
	if ferr := fails[id]; ferr != nil {
		if errors.Is(ferr, models.ErrMachineConflict) {
			h.setConflict(id, true)
			return nil, nil
		}
		gen := v.Gen
		var ce *models.ComposeError
		if errors.As(ferr, &ce) {
			gen = ce.Generation // the store's, which may be past this cache's
		}
		if h.composeFailed(id, gen) {
			h.recordFailures(ctx, []models.ComposeFailure{{MachineID: id, Machine: name, Generation: gen, Reason: ferr.Error()}})
		}
		return nil, nil
	}
	c := got[id]
	if c != nil {
		h.setComposed(c)
	}
	return c, nil
}

// SingleEnvelope is c with its single-signature envelope, for a poll of a
// host that does not verify batch envelopes: signed and stored on the
// first such poll of the generation (by any instance), then kept here.
func (h *Hub) SingleEnvelope(ctx context.Context, c *models.Composed) (*models.Composed, error) {
	if len(c.Envelope) > 0 {
		return c, nil
	}
	out, err := h.Store.SingleEnvelope(ctx, c, h.Signer)
	if err != nil {
		return nil, err
	}
	h.onPoll.Add(1)
	h.setComposed(out)
	return out, nil
}

// recordFailures puts why generations cannot be composed on their
// machines, where the overview shows them: the one place either way of
// composing (ahead of a fan-out, or for one poll) records them.
func (h *Hub) recordFailures(ctx context.Context, failed []models.ComposeFailure) {
	if len(failed) == 0 {
		return
	}
	h.Log.Warn("cannot compose declarations", "machines", len(failed), "first", failed[0].Machine, "err", failed[0].Reason)
	if err := h.Store.RecordComposeErrors(ctx, "controller:"+h.Instance, failed); err != nil {
		h.Log.Warn("recording compose failures", "err", err, "machines", len(failed))
		// Not recorded: the next poll or fan-out that fails to compose
		// these generations records them, rather than none ever doing so.
		h.mu.Lock()
		for _, f := range failed {
			if e := h.byID[f.MachineID]; e != nil && e.composeErr == f.Generation {
				e.composeErr = 0
			}
		}
		h.mu.Unlock()
	}
}

// View is what a poll reads of its machine at one moment.
type View struct {
	Gen      int64
	Pending  bool // a newer generation is queued to compose: its wake will come
	Conflict bool
	Changed  <-chan struct{}
	Composed *models.Composed
	Gone     bool
	// FinishedGen and FinishedSend are a send this instance knows the
	// store made to the machine (NoteFinishedSend).
	FinishedGen  int64
	FinishedSend string
}

// View reads one machine.
func (h *Hub) View(id int64) View {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byID[id]
	if e == nil {
		return View{Gone: true}
	}
	return View{Gen: e.gen, Pending: e.queued > e.gen, Conflict: e.conflict, Changed: e.changed, Composed: e.composed,
		FinishedGen: e.finishedGen, FinishedSend: e.finishedSend}
}

// PollStarted records a poll's arrival and what its host reported; it
// says whether version or schema changed and must be written. The poll
// becomes its machine's one waiting poll: the one it replaces is returned,
// for the caller to supersede (answer 304) outside the hub's lock.
func (h *Hub) PollStarted(id int64, hostVersion, schema string, batch bool, p Poll) (changed bool, replaced Poll) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.polls.Add(1) // balanced by PollEnded
	e := h.byID[id]
	if e == nil {
		return false, nil
	}
	e.polls++
	replaced, e.current = e.current, p
	e.lastSeen = time.Now()
	e.polledHere = e.lastSeen
	e.single = !batch
	h.seen[id] = true
	if e.hostVersion != hostVersion || e.schema != schema {
		e.hostVersion, e.schema = hostVersion, schema
		return true, replaced
	}
	return false, replaced
}

// HostInfoNotRecorded undoes what PollStarted took in of a host's version
// and schemas when writing them to the store failed, so the host's next
// poll writes them again: remembered as written, they would never be, and
// the store would go on composing for (and judging a trial by) the schemas
// the host had before. Values a newer poll took in meanwhile are kept.
func (h *Hub) HostInfoNotRecorded(id int64, hostVersion, schema string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byID[id]; e != nil && e.hostVersion == hostVersion && e.schema == schema {
		e.hostVersion, e.schema = "", notRecorded
	}
}

// ForgetHostInfo forgets what a machine's host's polls said of itself
// here: an instance recorded its host info, which may differ, so the next
// poll here writes what it says again.
func (h *Hub) ForgetHostInfo(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byID[id]; e != nil {
		e.hostVersion, e.schema = "", notRecorded
	}
}

// notRecorded is a machine's schemas when the store may not hold what its
// host said: no host advertises it, so its next poll writes again.
const notRecorded = "\x00not recorded"

// PollEnded records that p was answered.
func (h *Hub) PollEnded(id int64, p Poll) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.polls.Add(-1)
	if e := h.byID[id]; e != nil {
		e.polls--
		if e.current == p {
			e.current = nil
		}
		e.lastSeen = time.Now()
		h.seen[id] = true
	}
}

// setComposed caches a declaration a poll composed itself.
func (h *Hub) setComposed(c *models.Composed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byID[c.MachineID]; e != nil && c.Generation >= e.gen {
		// Composed from the store: no conflict there (see composeAndWake).
		e.gen, e.composed, e.conflict = c.Generation, c, false
	}
}

// setConflict records the store's verdict on a machine's conflict.
func (h *Hub) setConflict(id int64, conflict bool) {
	h.SetHead(id, 0, conflict)
}

// SetHead records what the store says of one machine: its generation (0:
// unknown) and whether it is in conflict; its polls wake if that changed.
func (h *Hub) SetHead(id, gen int64, conflict bool) {
	var ps []Parked
	h.mu.Lock()
	if e := h.byID[id]; e != nil && (e.conflict != conflict || gen > e.gen) {
		e.conflict = conflict
		e.gen = max(e.gen, gen)
		ps = e.wake()
	}
	h.mu.Unlock()
	h.send(ps)
}

// NoteFinishedSend remembers that the store made send to machine id at
// generation gen, so polls naming it as their host's finished send are
// not judged against the store again. A later generation's replaces it.
func (h *Hub) NoteFinishedSend(id, gen int64, send string) { h.noteSend(id, gen, send, false) }

// noteSend remembers send at gen as machine id's known send: only over an
// older one unless anyGen.
func (h *Hub) noteSend(id, gen int64, send string, anyGen bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byID[id]; e != nil && send != "" && (anyGen || gen >= e.finishedGen) {
		e.finishedGen, e.finishedSend = gen, send
	}
}

// NoteJudgedSend remembers, whatever the generation, that the store made
// send to machine id at gen: what a poll's host named and the store
// confirmed. A host still at an older generation than this instance last
// sent it (an apply it retries, a lost answer) names the same send on
// every poll, which is then not judged again each time.
func (h *Hub) NoteJudgedSend(id, gen int64, send string) { h.noteSend(id, gen, send, true) }

// composeFailed says whether a compose failure of gen is new (to be recorded once).
func (h *Hub) composeFailed(id, gen int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byID[id]
	return e != nil && e.newComposeFailure(gen)
}

// newComposeFailure says whether a compose failure of gen is not yet
// recorded, and remembers it. Call with h.mu held.
func (e *machineEntry) newComposeFailure(gen int64) bool {
	if e.composeErr >= gen {
		return false
	}
	e.composeErr = gen
	return true
}

// FlushSeen writes last-seen times now (tests; the run loop does it every interval).
func (h *Hub) FlushSeen() { h.flushSeen(context.Background()) }

// flushSeen writes last-seen for every machine seen since the last flush,
// and every machine that holds a poll now, in one statement: each the
// time its host was last seen (now, for one holding a poll).
func (h *Hub) flushSeen(ctx context.Context) {
	h.mu.Lock()
	now := time.Now()
	seen := make([]store.Seen, 0, len(h.seen))
	for id, e := range h.byID {
		if e.polls > 0 {
			seen = append(seen, store.Seen{ID: id, At: now})
		} else if h.seen[id] {
			seen = append(seen, store.Seen{ID: id, At: e.lastSeen})
		}
	}
	h.seen = map[int64]bool{}
	h.mu.Unlock()
	if len(seen) == 0 {
		return
	}
	if err := h.Store.FlushLastSeen(ctx, seen); err != nil {
		h.Log.Warn("flushing last-seen", "err", err)
	}
}

// Polling reports whether a machine's host holds a poll now.
func (h *Hub) Polling(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byName[name]
	return e != nil && e.polls > 0
}

// Heard is how many bumps the hub has been told of (on PostgreSQL each
// bump twice: in process and by notification).
func (h *Hub) Heard() int64 { return h.heard.Load() }

// ComposedAhead is how many machines the hub has composed ahead of their
// polls and woken: once per bump, however often it was heard.
func (h *Hub) ComposedAhead() int64 { return h.ahead.Load() }

// SentWithDeclaration is how many sends this instance wrote in the
// transaction that stored their declarations, answering their parked
// polls from the composing goroutine.
func (h *Hub) SentWithDeclaration() int64 { return h.withDecl.Load() }

// SetSingleForAll says whether an instance of a build that knows no batch
// envelopes serves from this store (see singleForAll); it reports whether
// that changed.
func (h *Hub) SetSingleForAll(on bool) bool { return h.singleForAll.Swap(on) != on }

// SingleForAll reports whether every declaration composed here is signed
// with its single envelope too (see SetSingleForAll).
func (h *Hub) SingleForAll() bool { return h.singleForAll.Load() }

// SignedOnPoll is how many single-signature envelopes this instance signed
// (and stored) on a poll's first need rather than while composing.
func (h *Hub) SignedOnPoll() int64 { return h.onPoll.Load() }

// OpenPolls is how many polls this instance holds now.
func (h *Hub) OpenPolls() int64 { return h.polls.Load() }

// Machines is how many machines the hub knows.
func (h *Hub) Machines() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byID)
}

// Settled reports whether every announced change has been composed and
// its polls woken (tests wait for it before counting statements).
func (h *Hub) Settled() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending) == 0 && !h.draining
}

// Stop makes the hub compose nothing more (the instance drains).
func (h *Hub) Stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
}
