package auth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Refusals keeps the audit of a repeated refusal to one row a key a
// minute: a refused host retries, a throttled login is tried again, and
// an attacker must not turn each refused request into a store write. The
// row that is due says how many were refused since the last one, so the
// record still says how hard someone tried.
type Refusals struct {
	mu   sync.Mutex
	last map[string]*refused
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

type refused struct {
	at    time.Time
	since int // refused since at, not audited
	row   Row
}

// Row is what a refusal's audit row is: who, what and of what. Refusals
// keeps each key's, so the refusals counted after its last row and never
// followed by another are put on the record (Overdue) rather than lost.
type Row struct {
	Actor, Action, Target string
	// Of says what a key counts when its rows' targets differ (a sender's
	// enrolments, whatever machine each named), for the row Overdue's are.
	Of string
}

// Unrecorded is a key's refusals counted since its last row, a minute or
// more ago, with no refusal since to carry them.
type Unrecorded struct {
	Row
	N int
	// Last is when the key's last row was written.
	Last time.Time
}

// refusalsKept bounds the keys remembered; past it they are forgotten
// at once (an attacker cycling keys then gets a row a key, as the first
// refusal of each always is).
const refusalsKept = 100_000

// Due says whether the refusal keyed by key, whose audit row is row, is
// to be audited now and, when it is, how many of the same key were refused
// since the last row without one.
func (r *Refusals) Due(key string, row Row) (due bool, since int) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil || len(r.last) > refusalsKept {
		r.last = map[string]*refused{}
	}
	if e, ok := r.last[key]; ok && now.Sub(e.at) < time.Minute {
		e.since++
		return false, 0
	} else if ok {
		since = e.since
	}
	r.last[key] = &refused{at: now, row: row}
	return true, since
}

// Overdue takes the refusals counted since their key's last row, a minute
// or more ago, that no later refusal carried onto the record: a burst
// followed by silence was one row for its first refusal, the rest never
// written. Each is counted as written now (the key's next row is a minute
// on). The controller writes them at its heartbeat.
func (r *Refusals) Overdue() []Unrecorded { return r.take(time.Minute) }

// Pending takes every refusal counted since its key's last row, however
// recent: what a stopping controller writes before it goes.
func (r *Refusals) Pending() []Unrecorded { return r.take(0) }

func (r *Refusals) take(age time.Duration) []Unrecorded {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Unrecorded
	for _, e := range r.last {
		if e.since > 0 && now.Sub(e.at) >= age {
			out = append(out, Unrecorded{Row: e.row, N: e.since, Last: e.at})
			e.at, e.since = now, 0
		}
	}
	return out
}

func (r *Refusals) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Auditor writes an audit row: the store's Audit.
type Auditor func(ctx context.Context, actor, action, target, detail string) error

// Record puts the refusal keyed by key on the record as row, with detail
// and how many of the key went unrecorded since, when it is due (Due).
func (r *Refusals) Record(ctx context.Context, audit Auditor, key string, row Row, detail string) error {
	if due, since := r.Due(key, row); due {
		return audit(ctx, row.Actor, row.Action, row.Target, detail+Since(since))
	}
	return nil
}

// RecordOverdue writes what Overdue takes; RecordPending what Pending
// takes.
func (r *Refusals) RecordOverdue(ctx context.Context, audit Auditor) error {
	return recordAll(ctx, audit, r.Overdue())
}

// RecordPending: see RecordOverdue.
func (r *Refusals) RecordPending(ctx context.Context, audit Auditor) error {
	return recordAll(ctx, audit, r.Pending())
}

func recordAll(ctx context.Context, audit Auditor, us []Unrecorded) error {
	var errs []error
	for _, u := range us {
		errs = append(errs, audit(ctx, u.Actor, u.Action, u.Target, u.Words()))
	}
	return errors.Join(errs...)
}

// Words is the detail of an Unrecorded's row.
func (u Unrecorded) Words() string {
	of := ""
	if u.Of != "" {
		of = " (" + u.Of + ")"
	}
	return fmt.Sprintf("%d more refused%s after the record of %s, none since", u.N, of, u.Last.UTC().Format(time.RFC3339))
}

// Since is what an audit row adds for the refusals of its key that were
// not audited since the one before (Due's since).
func Since(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d more refused since the last record of it", n)
}
