package auth

import (
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
}

// refusalsKept bounds the keys remembered; past it they are forgotten
// at once (an attacker cycling keys then gets a row a key, as the first
// refusal of each always is).
const refusalsKept = 100_000

// Due says whether the refusal keyed by key is to be audited now and,
// when it is, how many of the same key were refused since the last row
// without one.
func (r *Refusals) Due(key string) (due bool, since int) {
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
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
	r.last[key] = &refused{at: now}
	return true, since
}

// Since is what an audit row adds for the refusals of its key that were
// not audited since the one before (Due's since).
func Since(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d more refused since the last record of it", n)
}
