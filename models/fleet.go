package models

import "time"

// The word lists below are every value a fleet metric's label can take, so
// a gauge can say zero for a word no record has (a dashboard that sees no
// series cannot tell "none" from "not exported").

// MachineStates are the words StateRules.State says, in its precedence.
func MachineStates() []string {
	return []string{StateConflict, StateRevoked, StateOffline, StateRolledBack, StateUpgrading, StateFailed, StateBehind,
		StateRefused, StateRejected, StateUnhealthy, StateCurrent}
}

// HealthWords are the words of a machine's health.
func HealthWords() []string { return []string{HealthPassing, HealthFailing, HealthNone} }

// PlanStates are the states of a plan.
func PlanStates() []string {
	return []string{PlanRunning, PlanPaused, PlanDone, PlanSuperseded, PlanRefused, PlanHalted, PlanCancelled, PlanRolledBack}
}

// RolloutStates are the states of a host rollout.
func RolloutStates() []string {
	return []string{RolloutRunning, RolloutPaused, RolloutDone, RolloutHalted, RolloutCancelled}
}

// Triggers are the words of what made a generation (a send's trigger).
func Triggers() []string {
	return []string{TriggerAssignment, TriggerVariables, TriggerCurrent, TriggerPush, TriggerPlan, TriggerRollout,
		TriggerResolve, TriggerEnrol, TriggerSchema, TriggerLabel}
}

// Fleet is what the fleet's metrics are computed from, read from the store
// in one snapshot.
type Fleet struct {
	// Machines carry only the columns StateRules.State and the metrics read.
	Machines []Machine
	// Plans and Rollouts count plans and host rollouts by state.
	Plans    map[string]int64
	Rollouts map[string]int64
	// Modules are every module's id by name (the tiers of a module
	// deleted, its plans with it, are no longer exported, even when one
	// of its name is made again).
	Modules map[string]int64
	// Tiers are the tiers of the plans asked for (those after a plan id),
	// with the plans that have no steps as one span of no steps each, so
	// every plan in the range is seen with its state.
	Tiers []TierSpan
}

// TierSpan is one tier of one plan as its steps say.
type TierSpan struct {
	PlanID         int64
	ModuleID       int64
	Module         string
	PlanState      string
	PlanFinishedAt *time.Time
	Tier           int64
	Steps          int64 // 0: the plan has no steps (this span only carries its state)
	Finished       int64 // steps judged (applied or failed)
	Failed         int64
	Withdrawn      int64      // steps the plan ended before they applied
	Started        *time.Time // the first step reached
	Ended          *time.Time // the last step judged
}

// Tier outcomes (the label of the tier duration histogram).
const (
	TierCompleted = "completed"
	TierHalted    = "halted"
)

// Outcome says whether the tier has ended, how, and how long it took from
// the first machine reached to the last judged: completed when every step
// applied, halted when one failed (the plan halts on the tier's first
// failure) or the plan ended before its steps applied. A halted tier that is resumed is running again until its steps
// are judged anew.
func (t TierSpan) Outcome() (outcome string, took time.Duration, ended bool) {
	if t.Steps == 0 || t.Started == nil || t.Ended == nil {
		return "", 0, false
	}
	switch {
	case t.Failed > 0:
		outcome = TierHalted
	case t.Withdrawn > 0 && PlanFinal(t.PlanState) && t.PlanState != PlanDone:
		// Cancelled, superseded or rolled back before its machines
		// applied (a halted plan's failed step is withdrawn at its
		// cancel): it did not complete, and a halt counted stays so. A
		// step withdrawn from a plan still going (its machine deleted)
		// ends nothing.
		outcome = TierHalted
	case t.Finished == t.Steps:
		outcome = TierCompleted
	default:
		return "", 0, false
	}
	return outcome, max(t.Ended.Sub(*t.Started), 0), true
}

// PlanFinal reports whether a plan in state can change no more: done,
// superseded, refused, cancelled or rolled back (a halted plan can be
// resumed).
func PlanFinal(state string) bool {
	switch state {
	case PlanDone, PlanSuperseded, PlanRefused, PlanCancelled, PlanRolledBack:
		return true
	}
	return false
}
