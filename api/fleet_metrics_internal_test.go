package api

import (
	"testing"
	"time"

	"mesh/models"
)

// TestTierMetrics_FoldsWhatCanChangeNoMore: the tiers of plans finished
// long enough ago are folded into totals for good (and the next read asks
// only for later plans); a plan still open — or finished a moment ago —
// stops the folding, and its ended tiers are counted from each read.
func TestTierMetrics_FoldsWhatCanChangeNoMore(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	old, recent := at(-time.Hour), at(-time.Second)
	span := func(plan int64, state string, finished *time.Time, tier int64, took time.Duration, failed int64) models.TierSpan {
		return models.TierSpan{PlanID: plan, Module: "app", PlanState: state, PlanFinishedAt: finished, Tier: tier,
			Steps: 2, Finished: 2, Failed: failed, Started: at(-2 * time.Hour), Ended: at(-2*time.Hour + took)}
	}
	c := newFleetCollector(&Server{})
	spans := []models.TierSpan{
		span(1, models.PlanDone, old, 0, 10*time.Second, 0),
		span(1, models.PlanDone, old, 1, 100*time.Second, 0),
		{PlanID: 2, Module: "app", PlanState: models.PlanSuperseded, PlanFinishedAt: old}, // no steps
		span(3, models.PlanHalted, old, 0, 20*time.Second, 1),                             // may be resumed
		span(4, models.PlanDone, old, 0, 30*time.Second, 0),
	}
	if n := len(c.tierMetrics(spans, map[string]int64{"app": 0}, now)); n != 2 {
		t.Fatalf("%d histograms, want 2 (app completed, app halted)", n)
	}
	if c.foldedUpTo != 2 {
		t.Fatalf("folded up to plan %d, want 2 (plan 3 is halted and may be resumed)", c.foldedUpTo)
	}
	if h := c.folded[tierKey{"app", models.TierCompleted}]; h == nil || h.count != 2 || h.sum != 110 || h.buckets[0] != 0 || h.buckets[1] != 1 {
		t.Fatalf("folded: %+v", h)
	}

	// Plan 3 was cancelled a moment ago: not folded yet. The next read
	// asks only for plans after 2.
	spans = []models.TierSpan{
		span(3, models.PlanCancelled, recent, 0, 20*time.Second, 1),
		span(4, models.PlanDone, old, 0, 30*time.Second, 0),
	}
	c.tierMetrics(spans, map[string]int64{"app": 0}, now)
	if c.foldedUpTo != 2 {
		t.Fatalf("folded up to plan %d, want 2 (plan 3 finished a second ago)", c.foldedUpTo)
	}
	spans[0].PlanFinishedAt = old
	c.tierMetrics(spans, map[string]int64{"app": 0}, now)
	if c.foldedUpTo != 4 {
		t.Fatalf("folded up to plan %d, want 4", c.foldedUpTo)
	}
	if h := c.folded[tierKey{"app", models.TierCompleted}]; h.count != 3 {
		t.Fatalf("completed tiers folded: %d, want 3 (each once)", h.count)
	}
	if h := c.folded[tierKey{"app", models.TierHalted}]; h == nil || h.count != 1 {
		t.Fatalf("halted tiers folded: %+v", h)
	}
	if n := len(c.tierMetrics(nil, map[string]int64{"app": 0}, now)); n != 2 {
		t.Fatalf("with nothing new read: %d histograms, want the 2 folded", n)
	}
}
