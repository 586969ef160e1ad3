package api

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/store"
)

// Long-poll bounds (DESIGN.md): 50 s by default, under the 60 s common
// proxies allow; at most 300 s; plus up to wait/16 of jitter.
const (
	DefaultWait = 50 * time.Second
	MaxWait     = 300 * time.Second
)

// Header names of the host protocol.
const (
	HeaderHostVersion = "X-Mesh-Host-Version"
	HeaderSchema      = "X-Mesh-Schema"
	HeaderSend        = "X-Mesh-Send"
)

// parseWait reads ?wait=; out-of-range values are clamped, nonsense refused.
func parseWait(s string) (time.Duration, error) {
	if s == "" {
		return DefaultWait, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, err2 := strconv.Atoi(s)
		if err2 != nil {
			return 0, models.Invalid("wait", "a duration like 50s")
		}
		d = time.Duration(n) * time.Second
	}
	return min(max(d, 0), MaxWait), nil
}

// parseETagGen reads If-None-Match: "<generation>"; absent means 0.
func parseETagGen(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	s = strings.TrimPrefix(strings.TrimSpace(s), "W/")
	n, err := strconv.ParseInt(strings.Trim(s, `"`), 10, 64)
	if err != nil || n < 0 {
		return 0, models.Invalid("If-None-Match", `the last generation the host finished with, quoted: "42"`)
	}
	return n, nil
}

// pollDeclaration is the long poll: one select over the request, the
// machine's change channel and the timer. It answers 200 with the signed
// declaration once the machine's generation is newer than the host's,
// after the send row is committed; 304 when wait passes.
func (s *Server) pollDeclaration(c echo.Context) error {
	p := principal(c)
	if !s.Hub.Ready() {
		// Not yet listening and loaded: another instance can answer.
		c.Response().Header().Set("Retry-After", "0")
		return models.ErrStarting
	}
	wait, err := parseWait(c.QueryParam("wait"))
	if err != nil {
		return err
	}
	known, err := parseETagGen(c.Request().Header.Get("If-None-Match"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	hv, schema := c.Request().Header.Get(HeaderHostVersion), c.Request().Header.Get(HeaderSchema)
	if s.Hub.pollStarted(p.hostID, hv, schema) {
		if err := s.Store.RecordHostInfo(ctx, p.hostID, hv, schema); err != nil {
			return err
		}
	}
	parked := false
	defer func() {
		if !parked {
			s.Hub.pollEnded(p.hostID)
		}
	}()

	if wait > 0 {
		wait += rand.N(wait/16 + 1)
	}
	deadline := time.Now().Add(wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	checkedConflict := false
	for {
		if s.Draining() {
			c.Response().Header().Set("Retry-After", "0")
			return models.ErrDraining
		}
		v := s.Hub.view(p.hostID)
		if v.gone {
			return fmt.Errorf("%w: machine %s was removed", models.ErrUnauthorized, p.Machine)
		}
		if known > v.gen && !v.conflict && !checkedConflict {
			// The host finished a generation this instance has not seen:
			// judged against the store, never this cache.
			checkedConflict = true
			if err := s.judge(ctx, p.hostID, known); err != nil {
				return err
			}
			continue
		}
		// A newer generation queued to compose is waited for: sending the
		// one it supersedes would only make the host apply twice.
		if !v.conflict && !v.pending && v.gen > known {
			sent, err := s.deliver(c, p, v)
			if sent || err != nil {
				return err
			}
		}
		// Nothing to send: a long wait parks without a goroutine.
		if left := time.Until(deadline); left >= parkMin && c.Request().ProtoMajor == 1 && !checkedConflict {
			if err := s.park(c.Response().Writer, p, known, left); err == nil {
				parked = true
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			return c.NoContent(http.StatusNotModified)
		case <-v.changed:
		case <-s.drainCh:
		}
	}
}

// judge asks the store about a host that finished a generation this
// instance's cache has not seen: either the store is ahead of the cache
// (the cache learns that machine's generation) or the host is ahead of the
// store (conflict).
func (s *Server) judge(ctx context.Context, id, known int64) error {
	conflict, gen, err := s.Store.CheckConflict(ctx, id, known)
	if err != nil {
		return err
	}
	s.Hub.setHead(id, gen, conflict)
	return nil
}

// composed is the declaration of the machine's generation: the one
// composed for it, or composed now. It is nil when there is nothing the
// controller may send (a conflict, a compose failure, recorded once).
func (s *Server) composed(ctx context.Context, p *Principal, v view) (*store.Composed, error) {
	comp := v.composed
	if comp != nil && comp.Generation >= v.gen {
		return comp, nil
	}
	got, fails, err := s.Store.Compose(ctx, []int64{p.hostID}, s.Instance, s.Signer)
	if err != nil {
		return nil, err
	}
	if ferr := fails[p.hostID]; ferr != nil {
		if errors.Is(ferr, models.ErrMachineConflict) {
			s.Hub.setConflict(p.hostID, true)
			return nil, nil
		}
		gen := v.gen
		if ce, ok := ferr.(*store.ComposeError); ok {
			gen = ce.Generation // the store's, which may be past this cache's
		}
		if s.Hub.composeFailed(p.hostID, gen) {
			s.Log.Warn("cannot compose declaration", "machine", p.Machine, "generation", gen, "err", ferr)
			f := store.ComposeFailure{MachineID: p.hostID, Machine: p.Machine, Generation: gen, Reason: ferr.Error()}
			if err := s.Store.RecordComposeErrors(ctx, "controller:"+s.Instance, []store.ComposeFailure{f}); err != nil {
				s.Log.Warn("recording a compose failure", "machine", p.Machine, "err", err)
			}
		}
		return nil, nil
	}
	comp = got[p.hostID]
	if comp != nil {
		s.Hub.setComposed(comp)
	}
	return comp, nil
}

// deliver sends the declaration of the machine's generation: write the
// send row, then answer. It returns false when there is nothing it may send.
func (s *Server) deliver(c echo.Context, p *Principal, v view) (bool, error) {
	ctx := c.Request().Context()
	comp, err := s.composed(ctx, p, v)
	if err != nil || comp == nil {
		return false, err
	}
	sendID, err := s.recordSend(ctx, p.hostID, comp)
	if err != nil {
		return false, err
	}
	h := c.Response().Header()
	h.Set("ETag", fmt.Sprintf(`"%d"`, comp.Generation))
	h.Set(HeaderSend, sendID)
	h.Set("Cache-Control", "no-store")
	return true, c.Blob(http.StatusOK, echo.MIMEApplicationJSON, comp.Envelope)
}

// recordSend writes the send row of a declaration to a machine and
// returns its id once committed: every send is a row, committed before the
// bytes leave (held and parked polls alike).
func (s *Server) recordSend(ctx context.Context, machineID int64, comp *store.Composed) (string, error) {
	send := models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: machineID, Generation: comp.Generation,
		Digest: comp.Digest, InstanceID: s.Instance, Trigger: comp.Trigger, CreatedAt: time.Now().UTC()}
	return send.ID, s.Sends.Write(ctx, send)
}

// postReport stores a host's report as its own row. Reports are read
// leniently: unknown fields from a newer host are kept in the row's body.
func (s *Server) postReport(c echo.Context) error {
	p := principal(c)
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var r models.Report
	if err := decodeLenient(body, &r); err != nil {
		return err
	}
	if !models.ValidOutcome(r.Outcome) {
		return models.Invalid("outcome", "one of applied, refused, failed, rejected, upgraded, rolled_back")
	}
	if r.Generation < 0 {
		return models.Invalid("generation", "must not be negative")
	}
	row, err := s.Store.InsertReport(c.Request().Context(), p.hostID, &r, body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, map[string]any{"id": row.ID, "send": row.SendID, "outcome": row.Outcome})
}
