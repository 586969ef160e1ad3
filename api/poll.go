package api

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/auth"
	"mesh/models"
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
	if wait > 0 {
		wait += rand.N(wait/16 + 1)
	}
	ps := newPollSession(s, p.hostID, p.Machine, p.enrolment, known, time.Now().Add(wait))
	if fs := c.Request().Header.Get(models.HeaderFinishedSend); fs != "" {
		if !models.IsSendID(fs) {
			return models.Invalid(models.HeaderFinishedSend, "the X-Mesh-Send of the answer that delivered the generation in If-None-Match")
		}
		ps.finishedSend = strings.ToLower(fs)
	}
	hv := c.Request().Header.Get(HeaderHostVersion)
	if err := models.ValidVersion(HeaderHostVersion, hv, false); err != nil {
		return err
	}
	// The schemas the host decodes, in canonical form: a change of the set
	// bumps the machine's generation (store.RecordHostInfo).
	schemas, err := models.ParseSchemas(c.Request().Header.Get(HeaderSchema))
	if err != nil {
		return err
	}
	schema := schemas.String()
	ps.schemas, ps.hostVersion = schemas, hv
	// The envelope follows each poll's own header: a host rolled back to
	// a release that does not verify batches gets the single-signature one.
	ps.batch = models.AcceptsBatch(c.Request().Header.Get(models.HeaderEnvelope))
	changed, replaced := s.Hub.PollStarted(p.hostID, hv, schema, ps.batch, ps)
	if replaced != nil {
		replaced.Supersede()
	}
	parked := false
	defer func() {
		if !parked {
			s.Hub.PollEnded(p.hostID, ps)
		}
	}()
	if changed {
		if err := s.hostInfoLimit.take("machine " + p.Machine); err != nil {
			s.Hub.HostInfoNotRecorded(p.hostID, hv, schema)
			_ = s.refusals.Record(ctx, s.Store.Audit, p.Machine+"\x00host-info",
				auth.Row{Actor: "host:" + p.Machine, Action: "host-refused", Target: "machine/" + p.Machine},
				fmt.Sprintf("poll refused: its host version or schemas changed more than 10 times within minutes (now %s, %s) (from %s)", hv, schema, c.RealIP()))
			return err
		}
		if err := s.Store.RecordHostInfo(ctx, p.hostID, hv, schema); err != nil {
			s.Hub.HostInfoNotRecorded(p.hostID, hv, schema)
			return err
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		st, err := ps.next(ctx)
		if err != nil {
			return err
		}
		switch st.verdict {
		case pollDraining:
			c.Response().Header().Set("Retry-After", "0")
			return models.ErrDraining
		case pollGone:
			return fmt.Errorf("%w: machine %s was revoked or removed", models.ErrUnauthorized, p.Machine)
		case pollNotModified:
			return c.NoContent(http.StatusNotModified)
		case pollSend:
			// The same generation sent again and again is a host that does
			// not say what it has (no If-None-Match): each is a send row.
			// A host asks again only when an answer was lost or it
			// restarted; a new generation is a bucket of its own.
			if err := s.resendLimit.take(fmt.Sprintf("machine %s generation %d", p.Machine, st.comp.Generation)); err != nil {
				s.recordThrottled(c, p.Machine, "poll-refused", err)
				return err
			}
			body, err := ps.envelope(ctx, st.comp)
			if err != nil {
				return err
			}
			sendID, err := ps.recordSend(ctx, st.comp)
			switch {
			case errors.Is(err, errSuperseded):
				return c.NoContent(http.StatusNotModified)
			case errors.Is(err, models.ErrDraining):
				c.Response().Header().Set("Retry-After", "0")
				return err
			case err != nil:
				return err
			}
			for _, kv := range sendAnswer(st.comp, sendID, nil).headers {
				c.Response().Header().Set(kv[0], kv[1])
			}
			return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, body)
		}
		// Nothing to send: a long wait parks without a goroutine (not after
		// a conflict check, which a parked poll would not repeat).
		if left := time.Until(ps.deadline); left >= parkMin && c.Request().ProtoMajor == 1 && !ps.checked {
			if err := s.park(c.Response().Writer, c.Request(), ps, st.changed); err == nil {
				parked = true
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			return c.NoContent(http.StatusNotModified)
		case <-st.changed:
		case <-ps.superseded:
		case <-s.drainCh:
		}
	}
}

// postReport stores a host's report as its own row. Reports are read
// leniently: unknown fields from a newer host are kept in the row's body.
func (s *Server) postReport(c echo.Context) error {
	p := principal(c)
	key := "machine " + p.Machine
	if err := s.reportLimit.blocked(key); err != nil {
		s.recordThrottled(c, p.Machine, "report-refused", err)
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	// Bytes, then the count: a report refused for one spends neither.
	if err := s.reportBytes.takeN(key, (len(body)+1023)/1024); err != nil {
		s.recordThrottled(c, p.Machine, "report-refused", err)
		return err
	}
	if err := s.reportLimit.take(key); err != nil {
		s.recordThrottled(c, p.Machine, "report-refused", err)
		return err
	}
	r, err := models.DecodeReport(body)
	if err != nil {
		return err
	}
	if h := c.Request().Header.Get(models.HostTimeHeader); h != "" {
		hostNow, err := time.Parse(time.RFC3339Nano, h)
		if err != nil {
			return models.Invalid(models.HostTimeHeader, "the host's clock as the report left, RFC 3339 (2026-01-02T15:04:05.123Z)")
		}
		r.HostNow = &hostNow
	}
	row, err := s.Store.InsertReport(c.Request().Context(), p.hostID, r, body)
	if err != nil {
		return err
	}
	if row.SendID == "" {
		// On the record: a report no send backs moves nothing. At most a
		// row a minute for a machine, counting the rest, as a host's other
		// noise is: each was a row of its own.
		_ = s.refusals.Record(c.Request().Context(), s.Store.Audit, p.Machine+"\x00report-without-send",
			auth.Row{Actor: "host:" + p.Machine, Action: "report-without-send", Target: "machine/" + p.Machine},
			fmt.Sprintf("%s for generation %d: kept, moves no generation", r.Outcome, r.Generation))
	}
	if row.SendID != "" && models.FinalOutcome(row.Outcome) {
		// The store checked the send is this machine's at the report's
		// generation: the host's next polls name it.
		s.Hub.NoteFinishedSend(p.hostID, r.Generation, row.SendID)
	}
	return c.JSON(http.StatusCreated, map[string]any{"id": row.ID, "send": row.SendID, "outcome": row.Outcome})
}
