package models

import (
	"testing"
	"time"
)

func TestTierSpan_Outcome(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(90 * time.Second)
	for _, c := range []struct {
		name    string
		span    TierSpan
		outcome string
		took    time.Duration
		ended   bool
	}{
		{"Completed", TierSpan{Steps: 3, Finished: 3, Started: &t0, Ended: &t1}, TierCompleted, 90 * time.Second, true},
		{"HaltedOnTheFirstFailure", TierSpan{Steps: 3, Finished: 1, Failed: 1, Started: &t0, Ended: &t1}, TierHalted, 90 * time.Second, true},
		{"StillRunning", TierSpan{Steps: 3, Finished: 2, Started: &t0, Ended: &t1}, "", 0, false},
		{"NotReachedYet", TierSpan{Steps: 2}, "", 0, false},
		{"PlanWithoutSteps", TierSpan{}, "", 0, false},
		{"ClockSkewIsNoNegativeDuration", TierSpan{Steps: 1, Finished: 1, Started: &t1, Ended: &t0}, TierCompleted, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			outcome, took, ended := c.span.Outcome()
			if outcome != c.outcome || took != c.took || ended != c.ended {
				t.Fatalf("Outcome() = %q, %v, %v; want %q, %v, %v", outcome, took, ended, c.outcome, c.took, c.ended)
			}
		})
	}
}

func TestPlanFinal_EveryStateJudged(t *testing.T) {
	final := map[string]bool{PlanDone: true, PlanSuperseded: true, PlanRefused: true, PlanCancelled: true, PlanRolledBack: true}
	for _, s := range PlanStates() {
		if PlanFinal(s) != final[s] {
			t.Errorf("PlanFinal(%q) = %v", s, PlanFinal(s))
		}
	}
}
