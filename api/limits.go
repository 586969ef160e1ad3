package api

import (
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
