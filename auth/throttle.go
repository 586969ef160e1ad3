package auth

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Throttle slows password guessing: failed logins are limited per client
// address, and per (user, address) each failure after the first few
// doubles a wait, capped so that an attacker guessing at the admin from
// one address can never lock the admin out for long (or at all from
// another address). It lives in memory: each replica limits what it sees.
type Throttle struct {
	// PerAddress is how often an address may fail once its burst is spent.
	PerAddress rate.Limit
	Burst      int
	// FreeFailures per (user, address) before waits start; MaxWait caps them.
	FreeFailures int
	MaxWait      time.Duration
	Now          func() time.Time

	mu     sync.Mutex
	byAddr map[string]*rate.Limiter
	byUser map[userAddr]*failures
	// Attempts begun and not yet ended, counted as failures until they end
	// (Attempt): guesses sent at once are judged as if each had failed.
	pendingAddr map[string]int
	pendingUser map[userAddr]int
}

type userAddr struct{ user, addr string }

type failures struct {
	n     int
	until time.Time
}

// maxTracked bounds the throttle's memory; past it, it starts over (an
// attacker spraying addresses gains a fresh budget, never a lockout).
const maxTracked = 100_000

// NewThrottle is a throttle with the defaults: an address may fail 20
// times at once, then once every 3 s; a user from one address gets 3 free
// failures, then waits of 1, 2, 4 … s up to 30 s.
func NewThrottle() *Throttle {
	return &Throttle{PerAddress: rate.Every(3 * time.Second), Burst: 20, FreeFailures: 3, MaxWait: 30 * time.Second, Now: time.Now}
}

// Wait says how long user at addr must wait before trying again (0: may
// try now).
func (t *Throttle) Wait(user, addr string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waitLocked(user, addr, t.Now())
}

func (t *Throttle) waitLocked(user, addr string, now time.Time) time.Duration {
	k := userAddr{user, addr}
	var wait time.Duration
	if f := t.byUser[k]; f != nil && f.until.After(now) {
		wait = f.until.Sub(now)
	}
	// Attempts still being checked count as failed: past the free ones,
	// the next waits until they end (a second, or the check's own time).
	n := t.pendingUser[k]
	if f := t.byUser[k]; f != nil {
		n += f.n
	}
	if t.pendingUser[k] > 0 && n >= t.FreeFailures+1 {
		wait = max(wait, time.Second)
	}
	tokens := float64(t.Burst)
	if l := t.byAddr[addr]; l != nil {
		tokens = l.TokensAt(now)
	}
	if d := tokens - float64(t.pendingAddr[addr]); d < 1 {
		wait = max(wait, time.Duration((1-d)/float64(t.PerAddress)*float64(time.Second)))
	}
	return wait
}

// AddressThrottled says whether addr itself is over its limit (rather
// than one user's waits at it): its refusals are then one address's
// flood, whatever names they give.
func (t *Throttle) AddressThrottled(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tokens := float64(t.Burst)
	if l := t.byAddr[addr]; l != nil {
		tokens = l.TokensAt(t.Now())
	}
	return tokens-float64(t.pendingAddr[addr]) < 1
}

// Attempt begins a login of user at addr: a wait above 0 says it may not
// try yet; else done must be called with its result. Until then the
// attempt counts as failed, so guesses sent at once are held as if each
// had already failed (counted only after their checks, 60 at once were
// all checked, where one at a time would have been held after 3). A
// success costs nothing; a failure is recorded as Failed records it.
func (t *Throttle) Attempt(user, addr string) (wait time.Duration, done func(ok bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wait := t.waitLocked(user, addr, t.Now()); wait > 0 {
		return wait, nil
	}
	k := userAddr{user, addr}
	if t.pendingUser == nil || len(t.pendingUser) >= maxTracked {
		t.pendingUser, t.pendingAddr = map[userAddr]int{}, map[string]int{}
	}
	t.pendingUser[k]++
	t.pendingAddr[addr]++
	var once sync.Once
	return 0, func(ok bool) {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.pendingUser[k]--; t.pendingUser[k] <= 0 {
				delete(t.pendingUser, k)
			}
			if t.pendingAddr[addr]--; t.pendingAddr[addr] <= 0 {
				delete(t.pendingAddr, addr)
			}
			if ok {
				delete(t.byUser, k)
			} else {
				t.failLocked(user, addr, t.Now())
			}
		})
	}
}

// Failed records a failed login.
func (t *Throttle) Failed(user, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failLocked(user, addr, t.Now())
}

func (t *Throttle) failLocked(user, addr string, now time.Time) {
	if t.byAddr == nil || len(t.byAddr) >= maxTracked {
		t.byAddr = map[string]*rate.Limiter{}
	}
	if t.byUser == nil || len(t.byUser) >= maxTracked {
		t.byUser = map[userAddr]*failures{}
	}
	l := t.byAddr[addr]
	if l == nil {
		l = rate.NewLimiter(t.PerAddress, t.Burst)
		t.byAddr[addr] = l
	}
	l.AllowN(now, 1)
	k := userAddr{user, addr}
	f := t.byUser[k]
	if f == nil {
		f = &failures{}
		t.byUser[k] = f
	}
	f.n++
	if over := f.n - t.FreeFailures; over > 0 {
		wait := t.MaxWait
		if over < 16 {
			wait = min(time.Second<<(over-1), t.MaxWait)
		}
		f.until = now.Add(wait)
	}
}

// Succeeded forgets a user's failures from addr.
func (t *Throttle) Succeeded(user, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byUser, userAddr{user, addr})
}
