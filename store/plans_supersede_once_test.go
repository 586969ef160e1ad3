package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_SupersedeMovesTheNewerPlansCanaryOnce: plan of build 2 has
// reached its canary m1, whose host has not applied it. A plan of build 3
// supersedes it and reaches m1 at once (its canary too). m1 gets one new
// generation, naming build 3: the older plan's withdrawal of build 2 made
// a generation of its own for a machine the newer plan moved anyway, and
// its step said its next generation named the current build.
func TestPlan_SupersedeMovesTheNewerPlansCanaryOnce(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v2, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v2.Steps[0].State != models.StepSent || v2.Steps[0].Machine != "m1" {
			t.Fatalf("plan: %+v %v", v2, err)
		}
		before, _ := s.Machine(ctx, "m1")
		var heard []models.Bump
		s.OnBumped(func(bs []models.Bump) { heard = append(heard, bs...) })
		v3, err := s.CreatePlan(ctx, "test", "mod", 3, 0, "")
		if err != nil || v3.State != models.PlanRunning || v3.Steps[0].State != models.StepSent || v3.Steps[0].Machine != "m1" {
			t.Fatalf("plan 3: %+v %v", v3, err)
		}
		after, _ := s.Machine(ctx, "m1")
		v2, _ = s.Plan(ctx, v2.ID)
		if after.Generation != before.Generation+1 {
			t.Fatalf("m1 went from generation %d to %d in plan %d's creation (bumps heard: %+v); plan %d: %q, its m1 step %s: %q",
				before.Generation, after.Generation, v3.ID, heard, v2.ID, v2.Reason, v2.Steps[0].State, v2.Steps[0].Reason)
		}
	})
}
