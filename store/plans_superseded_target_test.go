package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_ASupersededPlansTargetOutlivesIt: plan A of build 2 reaches m2
// and m3 (its second tier); their hosts have not applied it when plan B of
// build 3 supersedes A. B halts on its canary and is cancelled. No plan is
// running, the current build is 1, and m2 never applied build 2 — yet m2
// was composed build 2, the target of a plan no longer running ("the
// build a running plan has reached it with"). The supersede takes it back.
func TestPlan_ASupersededPlansTargetOutlivesIt(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, a := planOfBuild2(t, s)
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		if a, _ = s.Plan(ctx, a.ID); a.Tier != 1 || a.Steps[1].State != models.StepSent {
			t.Fatalf("plan A: %+v", a)
		}
		b, err := s.CreatePlan(ctx, "test", "mod", 3, 0, "")
		if err != nil || b.State != models.PlanRunning {
			t.Fatalf("plan B: %+v %v", b, err)
		}
		m1, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeRefused, Reason: "escape: /x"})
		stepPlans(t, s)
		if b, err = s.SetPlanState(ctx, "user:olga", b.ID, "cancel"); err != nil {
			t.Fatal(err)
		}
		a, _ = s.Plan(ctx, a.ID)
		mod, _ := s.Module(ctx, "mod")
		m2, _ := s.Machine(ctx, "m2")
		if got := composedBuild(t, s, m2); got != 1 {
			t.Fatalf("plan A %s (%q), plan B %s; current %d; m2 (never applied build 2, runs 1) is composed build %d",
				a.State, a.Reason, b.State, *mod.CurrentBuild, got)
		}
	})
}
