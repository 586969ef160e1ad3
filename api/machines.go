package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/service"
)

// MachineView is a machine as the API shows it; its state is computed from
// records, never stored.
type MachineView struct {
	Name              string                         `json:"name"`
	OS                string                         `json:"os"`
	Arch              string                         `json:"arch"`
	Generation        int64                          `json:"generation"`
	GenerationTrigger string                         `json:"generation_trigger"`
	GenerationAt      time.Time                      `json:"generation_at"`
	AppliedGeneration int64                          `json:"applied_generation"`
	FinishedGen       int64                          `json:"finished_generation"`
	HostVersion       string                         `json:"host_version"`
	TargetHostVersion string                         `json:"target_host_version"`
	LauncherVersion   string                         `json:"launcher_version"`
	Schema            string                         `json:"schema"`
	State             string                         `json:"state"`
	LastOutcome       string                         `json:"last_outcome"`
	LastReason        string                         `json:"last_reason"`
	LastOutcomeAt     *time.Time                     `json:"last_outcome_at"`
	LastOutcomeGen    int64                          `json:"last_outcome_generation"`
	LastSeen          *time.Time                     `json:"last_seen"`
	ConflictHostGen   int64                          `json:"conflict_host_generation"`
	ConflictAt        *time.Time                     `json:"conflict_at"`
	ComposeError      string                         `json:"compose_error"`
	HeldBack          string                         `json:"held_back"`
	Health            HealthView                     `json:"health"`
	Running           map[string]models.RunningBuild `json:"running"`
	CreatedAt         time.Time                      `json:"created_at"`
	// Yanked are the builds it runs that were yanked since (it keeps them).
	Yanked        []models.YankedRun `json:"yanked,omitempty"`
	CertNotAfter  *time.Time         `json:"certificate_not_after"`
	RevokedReason string             `json:"revoked_reason"`
	RevokedAt     *time.Time         `json:"revoked_at"`
	RevokedBy     string             `json:"revoked_by"`
	// StateWords say the state whole, as the dashboard does
	// (models.SayState). A behind machine's are said only where what was
	// sent of its generation is read (its page, the lists): nil elsewhere.
	StateWords *models.StateWords `json:"state_words,omitempty"`
}

// HealthView is a machine's health as the API shows it: a fact with a time.
type HealthView struct {
	State     string     `json:"state"`
	Check     string     `json:"check"`
	Detail    string     `json:"detail"`
	Since     *time.Time `json:"since"`
	CheckedAt *time.Time `json:"checked_at"`
}

// lastSeen is when m's host was last heard from (models.LastSeen).
func (s *Server) lastSeen(m *models.Machine) *time.Time {
	return models.LastSeen(s.Hub.LastSeen(m.ID), m)
}

func (s *Server) machineView(m *models.Machine) MachineView {
	return s.machineViewSent(m, nil)
}

// machineViewSent is m's view with what was sent of its current
// generation (nil: not read, and a behind machine's words are not said).
func (s *Server) machineViewSent(m *models.Machine, sent map[int64]models.PendingSend) MachineView {
	seen := s.lastSeen(m)
	now := time.Now()
	running, err := m.RunningBuilds()
	if err != nil {
		s.Log.Error("machine view", "err", err) // shown without its running builds, said in the log
	}
	v := MachineView{Name: m.Name, OS: m.OS, Arch: m.Arch, Generation: m.Generation,
		GenerationTrigger: m.GenerationTrigger, GenerationAt: m.GenerationAt,
		AppliedGeneration: m.AppliedGeneration, FinishedGen: m.FinishedGen, HostVersion: m.HostVersion, LauncherVersion: m.LauncherVersion,
		TargetHostVersion: m.TargetHostVersion, Schema: m.Schema,
		State: s.Rules.State(m, seen, now), LastOutcome: m.LastOutcome, LastReason: m.LastReason, LastOutcomeAt: m.LastOutcomeAt,
		LastOutcomeGen: m.LastOutcomeGen, LastSeen: seen, ConflictHostGen: m.ConflictHostGen, ConflictAt: m.ConflictAt, Running: running, CreatedAt: m.CreatedAt,
		HeldBack: m.HeldBack, CertNotAfter: m.CertNotAfter, RevokedReason: m.RevokedReason, RevokedAt: m.RevokedAt, RevokedBy: m.RevokedBy}
	v.Health = HealthView{State: m.Health, Check: m.HealthCheck, Detail: m.HealthDetail, Since: m.HealthSince, CheckedAt: m.HealthAt}
	if v.Health.State == "" {
		v.Health.State = models.HealthNone
	}
	if m.ComposeErrorGen == m.Generation {
		v.ComposeError = m.ComposeError
	}
	if v.State != models.StateBehind || sent != nil {
		p := sent[m.ID]
		w := models.SayState(v.State, m, seen, &p, now)
		v.StateWords = &w
	}
	return v
}

func (s *Server) listMachines(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	var ms []models.Machine
	var sent map[int64]models.PendingSend
	next := "" // the state's page says its own next cursor
	if state := c.QueryParam("state"); state != "" {
		ms, next, sent, err = s.machinesInState(c.Request().Context(), state, limit, cur)
	} else {
		ms, sent, err = s.Store.MachinesSent(c.Request().Context(), limit, cur)
	}
	if err != nil {
		return err
	}
	yanked, err := s.Store.YankedBuilds(c.Request().Context())
	if err != nil {
		return err
	}
	views := make([]MachineView, len(ms))
	for i := range ms {
		views[i] = s.machineViewSent(&ms[i], sent)
		views[i].Yanked = models.YankedRunning(views[i].Running, yanked)
	}
	l := listOf(views, limit, func(MachineView) string { return strconv.FormatInt(ms[len(ms)-1].ID, 10) })
	if c.QueryParam("state") != "" {
		l.NextCursor = next
	}
	return c.JSON(http.StatusOK, l)
}

// machinesInState is a page of the machines in one state, newest first.
// A state is judged, not stored: the store narrows the fleet to the
// machines that may be in it, newest first, a batch at a time; each is
// judged from the few columns a state is read from (as the overview counts
// them) until the page is full, and only the page's machines are read
// whole.
func (s *Server) machinesInState(ctx context.Context, state string, limit int, cur int64) ([]models.Machine, string, map[int64]models.PendingSend, error) {
	if !slices.Contains(models.MachineStates(), state) {
		return nil, "", nil, models.Invalid("state", "one of "+strings.Join(models.MachineStates(), ", "))
	}
	now := time.Now()
	// Judged and read whole in one snapshot of the store: apart, a machine
	// that changed between them was listed under a state its own view did
	// not say.
	ms, more, sent, err := s.Store.MachinesInState(ctx, state, s.Rules, now, cur, limit, stateBatch, func(m *models.Machine) bool {
		return s.Rules.State(m, s.lastSeen(m), now) == state
	})
	next := ""
	if more && len(ms) > 0 {
		next = strconv.FormatInt(ms[len(ms)-1].ID, 10)
	}
	return ms, next, sent, err
}

// stateBatch is how many machines a page of one state judges at a time.
const stateBatch = 2000

func (s *Server) getMachine(c echo.Context) error {
	m, p, err := s.Store.MachineSent(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	yanked, err := s.Store.YankedBuilds(c.Request().Context())
	if err != nil {
		return err
	}
	setETag(c, m.Generation)
	v := s.machineViewSent(m, map[int64]models.PendingSend{m.ID: p})
	v.Yanked = models.YankedRunning(v.Running, yanked)
	return c.JSON(http.StatusOK, v)
}

func (s *Server) deleteMachine(c echo.Context) error {
	name := c.Param("name")
	if err := s.Store.DeleteMachine(c.Request().Context(), principal(c).Actor(), name); err != nil {
		return err
	}
	s.Hub.Remove(name)
	return c.NoContent(http.StatusNoContent)
}

// Assignments is the body of GET/PUT …/assignments.
type Assignments struct {
	Assignments []models.AssignmentView `json:"assignments"`
	// Selected is what selectors give the machine besides (shown, with a
	// plan rollback's pin; a PUT leaves it as it is).
	Selected []models.AssignmentView `json:"selected,omitempty"`
}

func (s *Server) getAssignments(c echo.Context) error {
	as, sel, m, err := s.Store.AssignmentsAndSelected(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	setETag(c, m.Generation)
	return c.JSON(http.StatusOK, Assignments{Assignments: as, Selected: sel})
}

func (s *Server) putAssignments(c echo.Context) error {
	im, err := ifMatch(c)
	if err != nil {
		return err
	}
	var req Assignments
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if req.Assignments == nil {
		return models.Invalid("assignments", "required (an empty list empties the machine on purpose)")
	}
	for i, a := range req.Assignments {
		if err := models.ValidName("assignments["+strconv.Itoa(i)+"].module", a.Module); err != nil {
			return err
		}
	}
	ctx := c.Request().Context()
	m, err := s.Store.SetAssignments(ctx, principal(c).Actor(), c.Param("name"), im, req.Assignments)
	if err != nil {
		return err
	}
	as, _, err := s.Store.Assignments(ctx, m.Name)
	if err != nil {
		return err
	}
	setETag(c, m.Generation)
	return c.JSON(http.StatusOK, Assignments{Assignments: as})
}

// Variables is the body of GET/PUT …/variables.
type Variables struct {
	Variables map[string]string `json:"variables"`
}

func (s *Server) getVariables(c echo.Context) error {
	vs, m, err := s.Store.Variables(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	setETag(c, m.Generation)
	return c.JSON(http.StatusOK, Variables{Variables: vs})
}

func (s *Server) putVariables(c echo.Context) error {
	im, err := ifMatch(c)
	if err != nil {
		return err
	}
	// Values read as pointers: a null is no string, and was stored as ""
	// (a secret replaced by nothing, a new generation sent).
	var body struct {
		Variables map[string]*string `json:"variables"`
	}
	if err := decodeStrict(c, &body); err != nil {
		return err
	}
	var req Variables
	if body.Variables != nil {
		req.Variables = make(map[string]string, len(body.Variables))
		for k, v := range body.Variables {
			if v == nil {
				return models.Invalid("variables."+k, `a string, not null ("" sets it empty; leave it out to remove it)`)
			}
			req.Variables[k] = *v
		}
	}
	m, err := s.Service.SetVariables(c.Request().Context(), principal(c).Actor(), &service.SetVariables{Machine: c.Param("name"), IfMatch: im, Variables: req.Variables})
	if err != nil {
		return err
	}
	setETag(c, m.Generation)
	return c.JSON(http.StatusOK, req)
}

func (s *Server) push(c echo.Context) error {
	im, err := ifMatch(c)
	if err != nil {
		return err
	}
	m, err := s.Store.Push(c.Request().Context(), principal(c).Actor(), c.Param("name"), im)
	if err != nil {
		return err
	}
	setETag(c, m.Generation)
	return c.JSON(http.StatusOK, s.machineView(m))
}

func (s *Server) resolve(c echo.Context) error {
	m, err := s.Store.Resolve(c.Request().Context(), principal(c).Actor(), c.Param("name"))
	if err != nil {
		return err
	}
	s.Hub.SetHead(m.ID, 0, false)
	setETag(c, m.Generation)
	return c.JSON(http.StatusOK, s.machineView(m))
}

// previewDeclaration shows the declaration of the machine's current
// generation without sending it (composing it if need be: the same bytes
// a poll will send).
func (s *Server) previewDeclaration(c echo.Context) error {
	ctx := c.Request().Context()
	m, err := s.Store.Machine(ctx, c.Param("name"))
	if err != nil {
		return err
	}
	got, fails, err := s.Store.Compose(ctx, []int64{m.ID}, s.Instance, s.Signer)
	if err != nil {
		return err
	}
	if ferr := fails[m.ID]; ferr != nil {
		if errors.Is(ferr, models.ErrInvalid) {
			// Said whole, as the machine's state says it: which module,
			// build and resource, not only the innermost field.
			return &models.NotComposableError{Generation: m.Generation, Why: ferr}
		}
		return ferr
	}
	// The single-signature envelope, as a host that does not verify
	// batch envelopes gets it (signed now if no such host needed it yet).
	comp, err := s.Store.SingleEnvelope(ctx, got[m.ID], s.Signer)
	if err != nil {
		return err
	}
	var env models.Envelope
	if err := json.Unmarshal(comp.Envelope, &env); err != nil {
		return err
	}
	setETag(c, comp.Generation)
	return c.JSON(http.StatusOK, map[string]any{
		"generation": comp.Generation, "digest": comp.Digest, "trigger": comp.Trigger,
		"declaration": json.RawMessage(env.Payload), "envelope": json.RawMessage(comp.Envelope),
	})
}

func (s *Server) machineSends(c echo.Context) error {
	limit, cur, err := pageSend(c)
	if err != nil {
		return err
	}
	m, err := s.Store.Machine(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	ss, err := s.Store.Sends(c.Request().Context(), m.ID, limit, cur)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(ss, limit, func(v models.SendView) string { return v.ID }))
}

func (s *Server) listSends(c echo.Context) error {
	limit, cur, err := pageSend(c)
	if err != nil {
		return err
	}
	ss, err := s.Store.Sends(c.Request().Context(), 0, limit, cur)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(ss, limit, func(v models.SendView) string { return v.ID }))
}

// pageSend reads a cursor of sends: a send's id, as next_cursor gives it
// (any other text was compared as one, and answered a page of whatever
// sorted below it).
func pageSend(c echo.Context) (int, string, error) {
	limit, cur, err := page(c)
	if err != nil || cur == "" {
		return limit, cur, err
	}
	if _, err := uuid.Parse(cur); err != nil || len(cur) != 36 {
		return 0, "", models.Invalid("cursor", "not a cursor this list gave (a send's id)")
	}
	return limit, cur, nil
}

// ReportView is a stored report as the API shows it: the host's own body
// (unknown fields kept) with the row's id and time.
type ReportView struct {
	ID         int64           `json:"id"`
	Send       string          `json:"send"`
	Generation int64           `json:"generation"`
	Outcome    string          `json:"outcome"`
	Reason     string          `json:"reason"`
	ReceivedAt time.Time       `json:"received_at"`
	Report     json.RawMessage `json:"report"`
}

func (s *Server) machineReports(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	m, err := s.Store.Machine(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	rs, cut, err := s.Store.Reports(c.Request().Context(), m.ID, limit, cur)
	if err != nil {
		return err
	}
	views := make([]ReportView, len(rs))
	for i, r := range rs {
		views[i] = ReportView{ID: r.ID, Send: r.SendID, Generation: r.Generation, Outcome: r.Outcome,
			Reason: r.Reason, ReceivedAt: r.CreatedAt, Report: json.RawMessage(r.Body)}
	}
	l := listOf(views, limit, func(v ReportView) string { return strconv.FormatInt(v.ID, 10) })
	if cut {
		// Ended early for its bodies' size (store.MaxReportsPage).
		l.NextCursor = strconv.FormatInt(rs[len(rs)-1].ID, 10)
	}
	return c.JSON(http.StatusOK, l)
}
