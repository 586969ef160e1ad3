package web

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

// Live progress: the plan and rollout pages poll a fragment every 2 s
// (hx-get, hx-trigger="every 2s") rather than hold a server-sent event
// stream. A poll is a short ordinary request, so it passes every proxy and
// load balancer unchanged and needs no buffering or timeout settings; and
// a viewer costs a request every 2 s, not a connection held open on top
// of the 10,000 host long polls the controller already keeps. The same
// URL serves page and fragment: HX-Request decides.

// PlanDetail is the plan page's data.
type PlanDetail struct {
	ID     int64
	Module string
	Build  int64
	State  string
	Words  string // the state in words: "rolled back"
	Reason string
	Halted bool
	Where  string // "tier 1 of 2 (canary)", "tier 2 of 2 — done"
	// Tier and Moves are the plan as the page shows it: an act names
	// them, so one made on a page the plan has moved on from is refused.
	Tier, Moves int64
	Made        string // by whom, when, and when it ended
	Tiers       []TierProgress
	Actions     []PlanAction
	// Live: the plan can still change, so the page polls its progress.
	Live bool
	// HostStep is the rollout of the host release the plan rolls out
	// before its first tier (nil: none).
	HostStep *HostStepDetail
	// PinnedAside are the module's machines a person pins, which no plan
	// moves (models.PlanView.PinnedAside).
	PinnedAside []models.PinnedAside
}

// HostStepDetail is a plan's host step: its rollout's state and each
// machine's.
type HostStepDetail struct {
	Release  string
	State    string
	Words    string
	Reason   string
	Upgraded int
	Total    int
	Machines []RolloutMachineRow
}

// TierProgress is one tier of a plan: how many of its machines applied
// the build, and each machine's step.
type TierProgress struct {
	Words   string
	Applied int
	Total   int
	Steps   []StepRow
}

// StepRow is a plan's step on one machine.
type StepRow struct {
	Machine    string
	State      string
	Words      string
	Reason     string
	Generation int64
	Previous   string // what it ran before the plan reached it
	When       string // when it was reached and, once it ended, when it ended
}

// PlanAction is a button on the plan page.
type PlanAction struct {
	Action string
	Label  string
	Hint   string
}

// made says who made a plan or rollout, when, and when it ended or
// halted (a halted one may be resumed: it has not ended).
func made(by string, at time.Time, state string, finished *time.Time) string {
	s := "Made by " + by + " at " + stamp(at)
	if finished != nil {
		s += "; " + stateWords(state) + " " + stamp(*finished) // "halted …", "done …"
	}
	return s + "."
}

// when says when a step or a machine's upgrade was reached and, once it
// ended, when: a word alone read the same a second or an hour on ("sent",
// "upgrading", "rolled back"). notYet is said of one not reached.
func when(state string, started, finished *time.Time, now time.Time, notYet string) string {
	switch {
	case finished != nil:
		w := stateWords(state) + " " + stamp(*finished) + " (" + ago(*finished, now) + ")"
		if started != nil {
			w += "; begun " + stamp(*started)
		}
		return w
	case started != nil:
		return "since " + stamp(*started) + " (" + ago(*started, now) + ")"
	case state == models.UpgradeWithdrawn || state == models.StepWithdrawn:
		// Said of one its rollout or plan ended before reaching: it
		// never will be ("not reached yet" said it would).
		return "never reached"
	}
	return notYet
}

// stateWords is a state word for a person: "rolled_back" → "rolled back".
func stateWords(state string) string { return strings.ReplaceAll(state, "_", " ") }

var planActionLabels = map[string]PlanAction{
	models.PlanPause:    {Label: "Pause", Hint: "no further machine is reached until it is resumed"},
	models.PlanResume:   {Label: "Resume", Hint: "the failed steps of its tier are judged again from now"},
	models.PlanCancel:   {Label: "Cancel", Hint: "stop here; machines whose hosts applied the build keep it, it is taken back from the rest"},
	models.PlanRollback: {Label: "Roll back", Hint: "pin every machine reached to the build it ran before, with the reason"},
}

// planDetail says a plan for a person; can is whether they may act on it.
func planDetail(v *models.PlanView, can bool) PlanDetail {
	d := PlanDetail{ID: v.ID, Module: v.Module, Build: v.Build, Tier: v.Tier, Moves: v.Moves, State: v.State, Words: stateWords(v.State), Reason: v.Reason,
		Halted: v.State == models.PlanHalted, Where: v.TierWords(), Made: made(v.CreatedBy, v.CreatedAt, v.State, v.FinishedAt), PinnedAside: v.PinnedAside}
	if d.Halted {
		d.Reason = strings.TrimPrefix(d.Reason, "halted: ") // the banner says "Halted." already
	}
	actions := models.PlanActions(v.State)
	d.Live = len(actions) > 0 // a settled plan offers nothing and changes no more
	if can {
		for _, a := range actions {
			pa := planActionLabels[a]
			pa.Action = a
			d.Actions = append(d.Actions, pa)
		}
	}
	if v.HostStep != nil {
		d.HostStep = hostStepDetail(v.HostStep)
		if v.HostStep.State != models.RolloutDone && (v.State == models.PlanRunning || v.State == models.PlanPaused) {
			d.Where = "host step: release " + v.HostRelease + " first"
		}
	}
	tiers := v.Tiers()
	d.Tiers = make([]TierProgress, tiers)
	for t := range d.Tiers {
		d.Tiers[t].Words = models.TierWords(int64(t), tiers, false)
	}
	for _, st := range v.Steps {
		tp := &d.Tiers[st.Tier]
		tp.Total++
		if st.State == models.StepApplied {
			tp.Applied++
		}
		r := StepRow{Machine: st.Machine, State: st.State, Words: stateWords(st.State), Reason: st.Reason, Generation: st.Generation,
			When: when(st.State, st.StartedAt, st.FinishedAt, time.Now(), "not reached yet")}
		switch {
		case st.State == models.StepPending:
			r.Previous = "not reached yet"
		case st.State == models.StepWithdrawn && st.Generation == 0:
			r.Previous = "never reached"
		case st.PreviousBuild > 0:
			r.Previous = "build " + strconv.FormatInt(st.PreviousBuild, 10)
		default:
			r.Previous = "no earlier build"
		}
		if st.State == models.StepSent {
			// The step made the machine's generation; whether it was sent
			// is its host's poll's doing (the machine's page shows its
			// sends): said as what was checked.
			r.Words = fmt.Sprintf("generation %d made for it, awaiting its host's report", st.Generation)
			if st.HostOfflineSince != nil {
				r.Words = fmt.Sprintf("generation %d made for it; its host is offline, last heard from %s: nothing reaches the machine until it polls again",
					st.Generation, stamp(*st.HostOfflineSince))
			}
		}
		tp.Steps = append(tp.Steps, r)
	}
	return d
}

func hostStepDetail(ro *models.RolloutView) *HostStepDetail {
	h := &HostStepDetail{Release: ro.Version, State: ro.State, Words: stateWords(ro.State), Reason: ro.Reason, Total: len(ro.Machines)}
	for _, m := range ro.Machines {
		if m.State == models.UpgradeUpgraded {
			h.Upgraded++
		}
		r := RolloutMachineRow{Machine: m.Machine, State: m.State, Words: stateWords(m.State), Previous: targetBefore(m.Previous), Reason: m.Reason,
			When: when(m.State, m.StartedAt, m.FinishedAt, time.Now(), "not reached yet")}
		h.Machines = append(h.Machines, r)
	}
	return h
}

// plansShown is how many of the newest plans the Plans page lists; those
// still running, paused or halted are listed whatever their age (a halted
// plan waiting for a person fell off the page once 50 newer were made).
const plansShown = 50

func (s *Server) plansPage(c echo.Context) error {
	ctx := c.Request().Context()
	ps, err := s.Store.Plans(ctx, plansShown, 0)
	if err != nil {
		return err
	}
	more := ""
	if len(ps) == plansShown {
		live, err := s.Store.LivePlans(ctx, ps[len(ps)-1].ID, 200)
		if err != nil {
			return err
		}
		ps = append(ps, live...)
		more = fmt.Sprintf("The newest %d plans, and every older one still running, paused or halted (%d); the API lists them all (GET /api/v1/plans).",
			plansShown, len(live))
	}
	ds := make([]PlanDetail, 0, len(ps))
	for i := range ps {
		ds = append(ds, planDetail(&ps[i], false))
	}
	return s.render(c, http.StatusOK, PlansPage(s.page(c, "Plans"), ds, more))
}

func planIDParam(c echo.Context) (int64, bool) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	return id, err == nil && id > 0
}

// planPage is a plan's page, or (asked by htmx) its progress fragment.
func (s *Server) planPage(c echo.Context) error {
	id, ok := planIDParam(c)
	if !ok {
		return s.errorPage(c, http.StatusNotFound, "No plan "+c.Param("id")+": a plan is named by its number.")
	}
	v, err := s.Store.Plan(c.Request().Context(), id)
	if errors.Is(err, models.ErrNotFound) {
		return s.errorPage(c, http.StatusNotFound, fmt.Sprintf("No plan %d.", id))
	}
	if err != nil {
		return err
	}
	p := s.page(c, fmt.Sprintf("Plan %d", id))
	v.MarkOffline(s.Rules, s.Seen.LastSeen, time.Now())
	d := planDetail(v, p.Viewer.can(models.RoleOperator))
	c.Response().Header().Add(echo.HeaderVary, HeaderHXRequest)
	if c.Request().Header.Get(HeaderHXRequest) != "" {
		return s.render(c, http.StatusOK, PlanProgress(p, d))
	}
	return s.render(c, http.StatusOK, PlanPage(p, d, s.takeSaved(c)))
}

// planAction pauses, resumes, cancels or rolls back a plan through the
// same store call as the API; which action is allowed from which state is
// models.PlanMove's rule, not this handler's.
func (s *Server) planAction(action string) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, ok := planIDParam(c)
		if !ok {
			return s.errorPage(c, http.StatusNotFound, "No plan "+c.Param("id")+": a plan is named by its number.")
		}
		// What the page showed (a page from before these fields acts on
		// the plan whatever it is, as it did): a second click, or a page
		// another person acted on since, changes nothing.
		var seen models.PlanSeen
		if t, err := strconv.ParseInt(c.FormValue("tier"), 10, 64); err == nil {
			seen.Tier = &t
		}
		if m, err := strconv.ParseInt(c.FormValue("moves"), 10, 64); err == nil {
			seen.Moves = &m
		}
		v, err := s.Store.ActOnPlan(c.Request().Context(), "user:"+who(c).User, id, action, seen)
		switch {
		case errors.Is(err, models.ErrNotFound):
			return s.errorPage(c, http.StatusNotFound, fmt.Sprintf("No plan %d.", id))
		case errors.Is(err, models.ErrConflict):
			return s.errorPageBack(c, http.StatusConflict, "Nothing was changed: "+problemText(err)+".",
				fmt.Sprintf("/plans/%d", id), fmt.Sprintf("Back to plan %d, as it is now", id))
		case errors.Is(err, models.ErrInvalid):
			return s.errorPageBack(c, http.StatusBadRequest, "Nothing was changed: "+problemText(err)+".",
				fmt.Sprintf("/plans/%d", id), fmt.Sprintf("Back to plan %d", id))
		case err != nil:
			return err
		}
		saved := fmt.Sprintf("%s: the plan is now %s", planActionLabels[action].Label, stateWords(v.State))
		return s.redirectSaved(c, fmt.Sprintf("/plans/%d", id), saved)
	}
}

// RolloutDetail is a host rollout's page data.
type RolloutDetail struct {
	Version  string
	State    string
	Words    string
	Reason   string
	Halted   bool
	Canary   string
	InFlight int64
	Deadline string
	Made     string
	Waves    []WaveProgress
	Live     bool
	// Plan is the plan whose host step the rollout is (0: the fleet's).
	Plan int64
}

// WaveProgress is one wave of a rollout: how many of its machines run the
// release, and each machine's state.
type WaveProgress struct {
	Words    string
	Upgraded int
	Total    int
	Machines []RolloutMachineRow
}

// RolloutMachineRow is one machine in a rollout.
type RolloutMachineRow struct {
	Machine  string
	Wave     int64
	State    string
	Words    string
	Previous string
	Reason   string
	// When says when it began and, once it ended, when it ended.
	When string
}

func rolloutDetail(v *models.RolloutView) RolloutDetail {
	d := RolloutDetail{Version: v.Version, State: v.State, Words: stateWords(v.State), Reason: v.Reason, Halted: v.State == models.RolloutHalted,
		Canary: orNone(v.Canary), InFlight: v.MaxInFlight, Deadline: (time.Duration(v.DeadlineSeconds) * time.Second).String(),
		Made: made(v.CreatedBy, v.CreatedAt, v.State, v.FinishedAt), Plan: v.PlanID}
	if d.Halted {
		d.Reason = strings.TrimPrefix(d.Reason, "halted: ")
	}
	// A halted rollout is not resumed (the release is marked failed), so
	// only a running or paused one changes.
	d.Live = v.State == models.RolloutRunning || v.State == models.RolloutPaused
	ms := slices.Clone(v.Machines)
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Wave < ms[j].Wave })
	byWave := map[int64]int{}
	for _, m := range ms {
		i, ok := byWave[m.Wave]
		if !ok {
			words := fmt.Sprintf("wave %d", m.Wave)
			if m.Wave == 0 {
				words = "canary"
			}
			d.Waves = append(d.Waves, WaveProgress{Words: words})
			i = len(d.Waves) - 1
			byWave[m.Wave] = i
		}
		w := &d.Waves[i]
		w.Total++
		if m.State == models.UpgradeUpgraded {
			w.Upgraded++
		}
		r := RolloutMachineRow{Machine: m.Machine, State: m.State, Words: stateWords(m.State), Previous: targetBefore(m.Previous), Reason: m.Reason,
			When: when(m.State, m.StartedAt, m.FinishedAt, time.Now(), "not reached yet")}
		w.Machines = append(w.Machines, r)
	}
	return d
}

// rolloutPage is a host release's rollout, or (asked by htmx) its
// progress fragment.
func (s *Server) rolloutPage(c echo.Context) error {
	version := c.Param("version")
	v, err := s.Store.Rollout(c.Request().Context(), version)
	if errors.Is(err, models.ErrNotFound) {
		return s.errorPage(c, http.StatusNotFound, "No rollout of host release "+version+".")
	}
	if err != nil {
		return err
	}
	d := rolloutDetail(v)
	c.Response().Header().Add(echo.HeaderVary, HeaderHXRequest)
	if c.Request().Header.Get(HeaderHXRequest) != "" {
		return s.render(c, http.StatusOK, RolloutProgress(d))
	}
	return s.render(c, http.StatusOK, RolloutPage(s.page(c, "Rollout of "+version), d))
}
