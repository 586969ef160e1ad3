package api

import (
	"context"
	"fmt"
	"io"
	"strings"
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
		return &models.RetryAfterError{After: d, Err: fmt.Errorf("%w: too many %s from %s; try again in %s", models.ErrTooManyRequests, l.what, addr, models.DurationWords(d))}
	}
	return nil
}

// blocked says, without spending, whether addr is over its limit now.
func (l *addressLimiter) blocked(addr string) error {
	l.mu.Lock()
	lim := l.byAddr[addr]
	l.mu.Unlock()
	if lim == nil || lim.Tokens() >= 1 {
		return nil
	}
	d := time.Duration((1 - lim.Tokens()) / float64(l.every) * float64(time.Second))
	return &models.RetryAfterError{After: d, Err: fmt.Errorf("%w: too many %s from %s; try again in %s", models.ErrTooManyRequests, l.what, addr, models.DurationWords(d))}
}

// Body read deadlines: a slow sender of a body is cut off, generously for
// uploads, sooner for a webhook (HookBodyDeadline). A request without a
// body (a long poll above all) gets none: when a read deadline passes
// while a handler waits, net/http cancels the request.
const (
	jsonBodyDeadline   = 30 * time.Second
	uploadBodyDeadline = 30 * time.Minute
)

func bodyDeadline(c echo.Context, d time.Duration) {
	if c.Request().ContentLength == 0 {
		return // a GET announcing a body gets the deadline too
	}
	_ = conns.BodyDeadline(c.Response().Writer, d)
}

// bodyBudget bounds the bytes of request bodies a route no credential
// protects holds in memory at once: a webhook's body is read whole before
// its signature can be checked, so without it any number of senders
// could each make the controller hold MaxHookBody (800 senders of 5 MiB
// took it past 7 GB). Bytes count as they are read, so a sender that
// announces a body and sends nothing holds nothing; one address holds at
// most perAddr of the total, so a few connections from one place cannot
// take it all. A read past either bound waits a while for room, then its
// request is refused with when to try again; whatever fits goes on
// meanwhile.
type bodyBudget struct {
	what           string
	total, perAddr int64 // bytes
	wait           time.Duration

	mu     sync.Mutex
	used   int64
	byAddr map[string]int64
	freed  chan struct{} // closed when room is given back
}

func newBodyBudget(what string, total, perAddr int64, wait time.Duration) *bodyBudget {
	return &bodyBudget{what: what, total: total, perAddr: perAddr, wait: wait, byAddr: map[string]int64{}, freed: make(chan struct{})}
}

// reader counts what body gives against the budget, for addr; its
// release gives it all back once the body is no longer held.
func (b *bodyBudget) reader(ctx context.Context, addr string, body io.ReadCloser) *budgetReader {
	return &budgetReader{ReadCloser: body, b: b, ctx: ctx, addr: addr}
}

type budgetReader struct {
	io.ReadCloser
	b    *bodyBudget
	ctx  context.Context
	addr string
	held int64
}

func (r *budgetReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		if berr := r.b.take(r.ctx, r.addr, int64(n)); berr != nil {
			return 0, berr
		}
		r.held += int64(n)
	}
	return n, err
}

func (r *budgetReader) release() {
	r.b.give(r.addr, r.held)
	r.held = 0
}

// take counts n more bytes of addr's, waiting up to the budget's wait
// for room.
func (b *bodyBudget) take(ctx context.Context, addr string, n int64) error {
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		fits, fitsAddr := b.used+n <= b.total, b.byAddr[addr]+n <= b.perAddr
		if fits && fitsAddr {
			b.used += n
			b.byAddr[addr] += n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
			continue
		case <-ctx.Done(): // its sender left: a refusal, not the server's error
		case <-timer.C:
		}
		held := fmt.Sprintf("%s of %s are being read at once", models.SizeWords(b.total), b.what)
		if !fitsAddr {
			held = fmt.Sprintf("%s of %s are being read at once from %s", models.SizeWords(b.perAddr), b.what, addr)
		}
		return &models.RetryAfterError{After: b.wait, Err: fmt.Errorf("%w: %s; try again in %s", models.ErrTooManyRequests, held, models.DurationWords(b.wait))}
	}
}

func (b *bodyBudget) give(addr string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.byAddr[addr] -= n; b.byAddr[addr] <= 0 {
		delete(b.byAddr, addr)
	}
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// textParams refuses a path parameter or a query value that is not text: a
// NUL, or bytes that are not UTF-8. Each store answered them its own way
// (SQLite a 404 or an empty page, PostgreSQL a 400), as bodies with them are
// refused alike.
func textParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !strings.HasPrefix(c.Request().URL.Path, "/api/v1/") {
			return next(c) // the dashboard's pages say it their own way
		}
		names, values := c.ParamNames(), c.ParamValues()
		for i := range min(len(names), len(values)) {
			if why := models.NotText(values[i]); why != "" {
				return models.Invalid(names[i], why)
			}
		}
		for name, vs := range c.QueryParams() {
			for _, v := range vs {
				if why := models.NotText(v); why != "" {
					return models.Invalid(models.EscapeLogLine(name, 100), why)
				}
			}
		}
		return next(c)
	}
}
