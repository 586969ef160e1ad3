package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_CancelTakesBackABuildFromAMachineWhoseModuleWasTakenAway: a
// plan of build 2 reaches its canary m1 (generation G). Before its host
// applies G, a person takes mod away from m1; its host applies that
// generation (G+1, no mod: it runs nothing of mod). The plan is cancelled.
// m1's host never applied build 2, so its target is to be taken back; a
// person giving mod back to m1 gets the module's current build 1. The
// generation without mod counted as one applying the build (its host runs
// nothing of mod, and it was not held back), and m1 got build 2 back.
func TestPlan_CancelTakesBackABuildFromAMachineWhoseModuleWasTakenAway(t *testing.T) {
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
		// Its host applies the generation without mod: it runs nothing.
		sentReport(t, s, m1.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied})
		v, err = s.SetPlanState(ctx, "user:olga", v.ID, "cancel")
		if err != nil || v.State != models.PlanCancelled {
			t.Fatalf("cancel: %+v %v", v, err)
		}
		m1, _ = s.Machine(ctx, "m1")
		if _, err := s.SetAssignments(ctx, "user:olga", "m1", &m1.Generation, []models.AssignmentView{{Module: "mod"}}); err != nil {
			t.Fatal(err)
		}
		m1, _ = s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 1 {
			t.Fatalf("m1's host never applied build 2 (step generation %d; it applied generation %d, without mod); plan cancelled (%q; m1's step %s: %q); mod given back to m1, it is composed build %d of the cancelled plan",
				stepGen, c.Generation, v.Reason, v.Steps[0].State, v.Steps[0].Reason, b)
		}
	})
}

// TestPlan_CancelTakesBackABuildFromAMachineWhoseStepWasWithdrawnAsGone:
// as above, but a worker's look steps the plan after mod was taken away
// from m1: its step is withdrawn ("no longer has module mod"). The plan
// is cancelled; mod given back to m1, it is to get the current build 1.
// The withdrawn step's target stayed through the cancel, and m1 got the
// cancelled plan's build 2.
func TestPlan_CancelTakesBackABuildFromAMachineWhoseStepWasWithdrawnAsGone(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.State != models.PlanRunning || v.Steps[0].State != models.StepSent || v.Steps[0].Machine != "m1" {
			t.Fatalf("plan: %+v %v", v, err)
		}
		m1, _ := s.Machine(ctx, "m1")
		if _, err := s.SetAssignments(ctx, "user:olga", "m1", &m1.Generation, []models.AssignmentView{}); err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		v, err = s.SetPlanState(ctx, "user:olga", v.ID, "cancel")
		if err != nil || v.State != models.PlanCancelled {
			t.Fatalf("cancel: %+v %v", v, err)
		}
		m1, _ = s.Machine(ctx, "m1")
		if _, err := s.SetAssignments(ctx, "user:olga", "m1", &m1.Generation, []models.AssignmentView{{Module: "mod"}}); err != nil {
			t.Fatal(err)
		}
		m1, _ = s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 1 {
			t.Fatalf("m1's host never applied build 2; plan cancelled (%q; m1's step %s: %q); mod given back to m1, it is composed build %d of the cancelled plan",
				v.Reason, v.Steps[0].State, v.Steps[0].Reason, b)
		}
	})
}
