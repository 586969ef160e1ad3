package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"mesh/conns"
	"mesh/models"
)

// addressLimiter limits what one client address may do on a route no
// credential protects, with a token bucket per address (the address after
// --trusted-proxies, echo's RealIP). Its memory is bounded: past
// maxTracked addresses it starts over, which gives a sprayer a fresh
// budget, never a lockout of others.
type addressLimiter struct {
	what  string
	every rate.Limit
	burst int

	mu     sync.Mutex
	byAddr map[string]*rate.Limiter
}

const maxTrackedAddresses = 100_000

func newAddressLimiter(what string, every rate.Limit, burst int) *addressLimiter {
	return &addressLimiter{what: what, every: every, burst: burst, byAddr: map[string]*rate.Limiter{}}
}

// take spends one token of addr; a refusal says when to come back.
func (l *addressLimiter) take(addr string) error { return l.takeN(addr, 1) }

// takeN spends n tokens of addr at once (n at most the burst).
func (l *addressLimiter) takeN(addr string, n int) error {
	l.mu.Lock()
	lim := l.byAddr[addr]
	if lim == nil {
		if len(l.byAddr) >= maxTrackedAddresses {
			l.byAddr = map[string]*rate.Limiter{}
		}
		lim = rate.NewLimiter(l.every, l.burst)
		l.byAddr[addr] = lim
	}
	l.mu.Unlock()
	r := lim.ReserveN(time.Now(), min(n, l.burst))
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return &models.RetryAfterError{After: d, Err: fmt.Errorf("%w: too many %s from %s; try again in %s", models.ErrTooManyRequests, l.what, addr, roundUp(d))}
	}
	return nil
}

// roundUp says a wait in whole seconds, never "0s".
func roundUp(d time.Duration) time.Duration { return max(time.Second, d.Round(time.Second)) }

// blocked says, without spending, whether addr is over its limit now.
func (l *addressLimiter) blocked(addr string) error {
	l.mu.Lock()
	lim := l.byAddr[addr]
	l.mu.Unlock()
	if lim == nil || lim.Tokens() >= 1 {
		return nil
	}
	d := time.Duration((1 - lim.Tokens()) / float64(l.every) * float64(time.Second))
	return &models.RetryAfterError{After: d, Err: fmt.Errorf("%w: too many %s from %s; try again in %s", models.ErrTooManyRequests, l.what, addr, roundUp(d))}
}

// limitByAddress is middleware spending one token per request.
func (l *addressLimiter) limitByAddress(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := l.take(c.RealIP()); err != nil {
			return err
		}
		return next(c)
	}
}

// Body read deadlines: a slow sender of a body is cut off, generously for
// uploads. A request without a body (a long poll above all) gets none:
// when a read deadline passes while a handler waits, net/http cancels the
// request.
const (
	jsonBodyDeadline   = 30 * time.Second
	uploadBodyDeadline = 30 * time.Minute
)

func bodyDeadline(c echo.Context, upload bool) {
	r := c.Request()
	if r.ContentLength == 0 {
		return // a GET announcing a body gets the deadline too
	}
	d := jsonBodyDeadline
	if upload {
		d = uploadBodyDeadline
	}
	_ = conns.BodyDeadline(c.Response().Writer, d)
}

// bodyBudget bounds the bytes of request bodies a route no credential
// protects holds in memory at once: a webhook's body is read whole before
// its signature can be checked, so without it any number of senders
// could each make the controller hold MaxHookBody. A request holds what
// its Content-Length says (the most the route takes when it says
// nothing) while its body is read and used; past the budget it waits a
// while for room, then is refused with when to try again. A body that
// fits goes ahead of a larger one waiting (not first come, first
// served): a large sender waiting must not hold up a forge's few KiB.
type bodyBudget struct {
	what  string
	total int64 // bytes
	max   int64 // the most one request holds
	wait  time.Duration

	mu    sync.Mutex
	used  int64
	freed chan struct{} // closed when room is given back
}

func newBodyBudget(what string, total, max int64, wait time.Duration) *bodyBudget {
	return &bodyBudget{what: what, total: total, max: max, wait: wait, freed: make(chan struct{})}
}

// hold takes room for a body of declared bytes (-1: unknown); release
// gives it back.
func (b *bodyBudget) hold(ctx context.Context, declared int64) (release func(), err error) {
	n := declared
	if n < 0 || n > b.max {
		n = b.max
	}
	n = max(n, 1)
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.used+n <= b.total {
			b.used += n
			b.mu.Unlock()
			return func() { b.give(n) }, nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
			continue
		case <-ctx.Done(): // its sender left: a refusal, not the server's error
		case <-timer.C:
		}
		return nil, &models.RetryAfterError{After: b.wait, Err: fmt.Errorf("%w: %s of %s are being read at once; try again in %s",
			models.ErrTooManyRequests, models.SizeWords(b.total), b.what, roundUp(b.wait))}
	}
}

func (b *bodyBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}
