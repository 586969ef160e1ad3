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
		v := canaryOfBuild2(t, s)
		stepGen := v.Steps[0].Generation
		assignTo(t, s, "m1")
		m1, _ := s.Machine(ctx, "m1")
		c := composeMachine(t, s, m1.ID)
		// Its host applies the generation without mod: it runs nothing.
		sentReport(t, s, m1.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied})
		v = cancelPlan(t, s, v.ID)
		assignTo(t, s, "m1", "mod")
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
		v := canaryOfBuild2(t, s)
		assignTo(t, s, "m1")
		stepPlans(t, s)
		v = cancelPlan(t, s, v.ID)
		assignTo(t, s, "m1", "mod")
		m1, _ := s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 1 {
			t.Fatalf("m1's host never applied build 2; plan cancelled (%q; m1's step %s: %q); mod given back to m1, it is composed build %d of the cancelled plan",
				v.Reason, v.Steps[0].State, v.Steps[0].Reason, b)
		}
	})
}

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
		v := canaryOfBuild2(t, s)
		stepGen := v.Steps[0].Generation
		assignTo(t, s, "m1")
		m1, _ := s.Machine(ctx, "m1")
		c := composeMachine(t, s, m1.ID)
		sentReport(t, s, m1.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied})
		assignTo(t, s, "m1", "mod")
		v = cancelPlan(t, s, v.ID)
		m1, _ = s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 1 || v.Steps[0].State == models.StepApplied {
			t.Fatalf("m1's host never applied build 2 (step generation %d; it applied only generation %d, without mod); mod given back, plan cancelled (%q; m1's step %s: %q); m1 is composed build %d of the cancelled plan",
				stepGen, c.Generation, v.Reason, v.Steps[0].State, v.Steps[0].Reason, b)
		}
	})
}

// canaryOfBuild2 is a plan of build 2 of mod made over planFixture's
// machines, its canary m1 sent it.
func canaryOfBuild2(t *testing.T, s *store.Store) *models.PlanView {
	t.Helper()
	planFixture(t, s)
	v, err := s.CreatePlan(context.Background(), "test", "mod", 2, 0, "")
	if err != nil || v.State != models.PlanRunning || v.Steps[0].State != models.StepSent || v.Steps[0].Machine != "m1" {
		t.Fatalf("plan: %+v %v", v, err)
	}
	return v
}

// assignTo gives machine name exactly the modules named (none: takes
// every one away), as a person's edit.
func assignTo(t *testing.T, s *store.Store, name string, modules ...string) {
	t.Helper()
	ctx := context.Background()
	m, err := s.Machine(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	as := []models.AssignmentView{}
	for _, mod := range modules {
		as = append(as, models.AssignmentView{Module: mod})
	}
	if _, err := s.SetAssignments(ctx, "user:olga", name, &m.Generation, as); err != nil {
		t.Fatal(err)
	}
}

// cancelPlan cancels plan id as a person does.
func cancelPlan(t *testing.T, s *store.Store, id int64) *models.PlanView {
	t.Helper()
	v, err := s.SetPlanState(context.Background(), "user:olga", id, "cancel")
	if err != nil || v.State != models.PlanCancelled {
		t.Fatalf("cancel: %+v %v", v, err)
	}
	return v
}
