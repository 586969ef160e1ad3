package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_CancelTakesBackABuildFromAMachineWhoseModuleWasGivenBackBeforeIt:
// a plan of build 2 reaches m1 (generation G). Before its host applies G,
// a person takes mod away from m1 (G+1); its host applies G+1 (it runs
// nothing of mod). The person gives mod back (G+2, not applied yet). The
// plan is cancelled. m1's host never applied build 2: its target is to
// be taken back, and m1 composed the current build 1. The generation
// without mod counted as one applying the build, and m1 was composed the
// cancelled build.
func TestPlan_CancelTakesBackABuildFromAMachineWhoseModuleWasGivenBackBeforeIt(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.State != models.PlanRunning || v.Steps[0].State != models.StepSent || v.Steps[0].Machine != "m1" {
			t.Fatalf("plan: %+v %v", v, err)
		}
		stepGen := v.Steps[0].Generation
		m1, _ := s.Machine(ctx, "m1")
		if _, err := s.SetAssignments(ctx, "user:olga", "m1", &m1.Generation, []models.AssignmentView{}); err != nil {
			t.Fatal(err)
		}
		m1, _ = s.Machine(ctx, "m1")
		c := composeMachine(t, s, m1.ID)
		sentReport(t, s, m1.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied})
		m1, _ = s.Machine(ctx, "m1")
		if _, err := s.SetAssignments(ctx, "user:olga", "m1", &m1.Generation, []models.AssignmentView{{Module: "mod"}}); err != nil {
			t.Fatal(err)
		}
		v, err = s.SetPlanState(ctx, "user:olga", v.ID, "cancel")
		if err != nil || v.State != models.PlanCancelled {
			t.Fatalf("cancel: %+v %v", v, err)
		}
		m1, _ = s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 1 || v.Steps[0].State == models.StepApplied {
			t.Fatalf("m1's host never applied build 2 (step generation %d; it applied only generation %d, without mod); mod given back, plan cancelled (%q; m1's step %s: %q); m1 is composed build %d of the cancelled plan",
				stepGen, c.Generation, v.Reason, v.Steps[0].State, v.Steps[0].Reason, b)
		}
	})
}
