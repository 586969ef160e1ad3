package models

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Plan states.
const (
	PlanRunning    = "running"
	PlanPaused     = "paused"
	PlanDone       = "done"
	PlanSuperseded = "superseded"
	PlanRefused    = "refused"
	PlanHalted     = "halted"
	PlanCancelled  = "cancelled"
	PlanRolledBack = "rolled_back"
)

// What a failing tier does to its plan (a module's on_failure).
const (
	OnFailureHalt     = "halt"
	OnFailureRollback = "rollback"
)

// Plan step states.
const (
	StepPending = "pending"
	StepSent    = "sent"
	StepApplied = "applied"
	StepFailed  = "failed"
	// StepWithdrawn: the plan was cancelled before the machine's host
	// applied its build; the target it was given was taken back.
	StepWithdrawn = "withdrawn"
)

// Plan is a durable rollout of one build of a module, tier by tier. It
// records intent: a step makes the build a machine's target; the
// declaration is composed when the machine polls.
type Plan struct {
	ID         int64      `gorm:"primaryKey" json:"id"`
	ModuleID   int64      `json:"-"`
	Module     string     `gorm:"-" json:"module"`
	Build      int64      `json:"build"`
	State      string     `json:"state"`
	Reason     string     `json:"reason"`
	Tier       int64      `json:"tier"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// HostRelease is the host release the plan rolls out to its machines
	// before its first tier (its host step; "" when none).
	HostRelease string `json:"host_release"`
	// Moves counts the plan's changes: every update of its row (state,
	// tier, reason) adds one (BeforeUpdate). An act may name the moves its
	// caller saw, and is refused once the plan has moved since.
	Moves int64 `json:"moves"`
}

// PlanSeen is what a person saw of a plan when they decided to act on it
// (each nil: not said): its tier, and its moves. An act is refused once
// the plan has moved from what was seen.
type PlanSeen struct {
	Tier  *int64
	Moves *int64
}

// BeforeUpdate counts a move of the plan, whichever code changes it: a
// worker's step, halt or pause, or a person's act.
func (p *Plan) BeforeUpdate(tx *gorm.DB) error {
	tx.Statement.SetColumn("moves", gorm.Expr("moves + 1"))
	return nil
}

// PlanStep is a plan's progress on one machine.
type PlanStep struct {
	PlanID     int64      `gorm:"primaryKey" json:"-"`
	MachineID  int64      `gorm:"primaryKey" json:"-"`
	Machine    string     `gorm:"-" json:"machine"`
	Tier       int64      `json:"tier"`
	State      string     `json:"state"`
	Generation int64      `json:"generation"`
	Reason     string     `json:"reason"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// PreviousBuild is the build the machine ran before the plan reached
	// it (0: none), where a rollback pins it.
	PreviousBuild int64 `json:"previous_build"`
	// MachineName is kept when the machine is deleted, so the step stays
	// on the plan's record under its name.
	MachineName string `json:"-"`
	// HostOfflineSince is when the host of a sent step's machine was last
	// heard from, said only when that is long enough ago to call it
	// offline (PlanView.MarkOffline): the step waits for a host that is
	// not polling, which "awaiting its host's report" alone hid until the
	// tier's deadline.
	HostOfflineSince *time.Time `gorm:"-" json:"host_offline_since,omitempty"`
	// seen is the store's last_seen of the machine, its created_at when
	// never heard from (read with the plan).
	lastSeen, created *time.Time
}

// SetMachineSeen is what the store read of the step's machine: when its
// host was last heard from (nil: never), and when it was enrolled.
func (st *PlanStep) SetMachineSeen(lastSeen, created *time.Time) {
	st.lastSeen, st.created = lastSeen, created
}

// MarkOffline says, of every sent step of v, whether its machine's host
// is offline by rules at now, heard giving what this instance heard
// since the store's last_seen (as the machine list judges it).
func (v *PlanView) MarkOffline(rules StateRules, heard func(id int64) *time.Time, now time.Time) {
	for i := range v.Steps {
		st := &v.Steps[i]
		if st.State != StepSent || st.created == nil {
			continue
		}
		seen := LastSeen(heard(st.MachineID), &Machine{LastSeen: st.lastSeen})
		since := seen
		if since == nil {
			since = st.created
		}
		if now.Sub(*since) > rules.OfflineAfter {
			t := *since
			st.HostOfflineSince = &t
		}
	}
}

// MachineTarget is the build a plan has reached a machine with. It only
// ever rises: an older plan's step that runs late cannot lower it.
type MachineTarget struct {
	MachineID int64 `gorm:"primaryKey"`
	ModuleID  int64 `gorm:"primaryKey"`
	Build     int64
	PlanID    int64
}

// StepVerdict is what a sent plan step has come to: StepApplied, StepFailed
// with the reason in the operator's words, or "" (still waiting).
type StepVerdict struct {
	State  string
	Reason string
	// Unreported: failed for no report within the deadline from a host
	// heard from lately; whether it was ever sent is the store's to say.
	Unreported bool
}

// JudgeStep decides a sent step from its machine's records: applied (and
// healthy where checks are declared), failed (refused, rejected, failed,
// held back, unhealthy past the grace, or no report within the tier's
// deadline — offline, if its host went silent), or still waiting. running
// is the build of the plan's module the machine reports running.
//
// A generation that cannot be composed fails it at once too, with why:
// m.ComposeError must be kept only while nothing was composed for the
// step's generation or a later one (the caller clears it otherwise).
//
// Held back fails the step at once, with the held-back reason: m.HeldBack
// must be the reason of a generation at least the step's (the caller
// clears it otherwise). Such a machine is sent what it last applied and
// none of the new content — whichever module needs the later schema — so
// waiting for the deadline would only hide why; the reason names the
// release to roll out first.
func JudgeStep(r StateRules, m *Machine, running int64, st *PlanStep, build int64, deadline time.Duration, now time.Time) StepVerdict {
	fail := func(format string, a ...any) StepVerdict {
		return StepVerdict{State: StepFailed, Reason: m.Name + " " + fmt.Sprintf(format, a...)}
	}
	switch {
	case m.LastOutcomeGen >= st.Generation && (m.LastOutcome == OutcomeRefused || m.LastOutcome == OutcomeRejected):
		// Of the step's generation or a later one: a refusal the host
		// could not tie to a send (generation 0) says nothing of it.
		return fail("%s generation %d: %s", m.LastOutcome, m.LastOutcomeGen, m.LastReason)
	case m.AppliedGeneration >= st.Generation && running >= build:
		switch {
		case r.Unhealthy(m, now):
			return StepVerdict{State: StepFailed, Reason: UnhealthyWords(m)}
		case m.Health == HealthFailing:
			return StepVerdict{} // within the grace: a service may still be starting
		}
		return StepVerdict{State: StepApplied}
	case m.HeldBack != "":
		return fail("%s", m.HeldBack)
	case m.ComposeError != "" && m.ComposeErrorGen == m.Generation && m.Generation >= st.Generation:
		// The caller keeps the error only while nothing was composed for
		// the step's generation or a later one (then nothing could be
		// sent since, whichever module's words the error has).
		// Nothing can be sent to it: waiting for the deadline would only
		// hide why (its step said "sent" while nothing was).
		return fail("generation %d cannot be composed: %s", m.Generation, m.ComposeError)
	case m.LastOutcome == OutcomeFailed && m.AppliedGeneration < st.Generation && m.LastOutcomeGen >= st.Generation:
		// A failure of the step's generation or a later one: a retry of
		// an older one's failure says nothing of the step's.
		return fail("failed to apply generation %d: %s", m.LastOutcomeGen, m.LastReason)
	case st.StartedAt != nil && now.Sub(*st.StartedAt) > deadline:
		if m.LastSeen == nil || now.Sub(*m.LastSeen) > r.OfflineAfter {
			if !Polled(m.LastSeen, m.CreatedAt) {
				return fail("offline: never polled")
			}
			return fail("offline since %s", m.LastSeen.UTC().Format("15:04:05"))
		}
		v := fail("did not report generation %d within %s", st.Generation, deadline)
		v.Unreported = true
		return v
	}
	return StepVerdict{}
}

// UnhealthyWords is why a step of an unhealthy machine failed.
func UnhealthyWords(m *Machine) string {
	return fmt.Sprintf("%s check %s unhealthy since %s: %s", m.Name, m.HealthCheck, m.HealthSince.UTC().Format("15:04:05"), m.HealthDetail)
}

// TierWords names a tier for a person: "tier 1 of 2 (canary)", "tier 2 of
// 2 — done".
func TierWords(tier, tiers int64, done bool) string {
	s := fmt.Sprintf("tier %d of %d", tier+1, tiers)
	if tier == 0 && tiers > 1 {
		s += " (canary)"
	}
	if done {
		s = fmt.Sprintf("tier %d of %d — done", tiers, tiers)
	}
	return s
}

// UntriedTierPause begins the reason of a plan that paused itself after
// a tier none of whose machines took its build (each step withdrawn).
const UntriedTierPause = "paused: untried: "

// Actions a person may take on a plan (POST /api/v1/plans/{id}/{action},
// and the dashboard's buttons).
const (
	PlanPause    = "pause"
	PlanResume   = "resume"
	PlanCancel   = "cancel"
	PlanRollback = "rollback"
)

// planMoves is, for each action, the states it is allowed from and the
// state it leads to. Rollback only from halted: a running plan is paused
// or cancelled first; a finished one is followed by a newer build.
var planMoves = []struct {
	action string
	from   []string
	to     string
}{
	{PlanPause, []string{PlanRunning}, PlanPaused},
	{PlanResume, []string{PlanPaused, PlanHalted}, PlanRunning},
	{PlanCancel, []string{PlanRunning, PlanPaused, PlanHalted}, PlanCancelled},
	{PlanRollback, []string{PlanHalted}, PlanRolledBack},
}

// PlanMove is the state action leads a plan in state from to; ok is false
// when the action is not allowed from that state (or is no action).
func PlanMove(action, from string) (to string, ok bool) {
	for _, m := range planMoves {
		if m.action != action {
			continue
		}
		for _, f := range m.from {
			if f == from {
				return m.to, true
			}
		}
	}
	return "", false
}

// PlanActions are the actions allowed on a plan in state, in the order a
// person is offered them. None: the plan is settled and will not change.
func PlanActions(state string) []string {
	var out []string
	for _, m := range planMoves {
		if _, ok := PlanMove(m.action, state); ok {
			out = append(out, m.action)
		}
	}
	return out
}

// Tiers is how many tiers the plan has (its steps' highest tier + 1).
func (v *PlanView) Tiers() int64 {
	var n int64
	for _, st := range v.Steps {
		n = max(n, st.Tier+1)
	}
	return n
}

// TierWords says where the plan is: "tier 1 of 2 (canary)", or "tier 2 of
// 2 — done" once it is done (its tier then points past the last one, which
// must never read as a tier of its own).
func (v *PlanView) TierWords() string {
	tiers := v.Tiers()
	if tiers == 0 {
		return "no machines to reach"
	}
	done := v.State == PlanDone || v.Tier >= tiers
	return TierWords(min(v.Tier, tiers-1), tiers, done)
}
