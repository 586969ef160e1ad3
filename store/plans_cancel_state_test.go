package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_CancelAfterItsCanaryAppliedShowsItsStepAsItIs: the canary m1
// applies the plan's build (healthy, running it) and the plan is cancelled
// before a worker's next look. Its step kept saying "sent" — "generation
// N made for it, awaiting its host's report" — for good, though its host
// had reported applying it before the cancel. It says applied.
func TestPlan_CancelAfterItsCanaryAppliedShowsItsStepAsItIs(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		v := canaryOfBuild2(t, s)
		applied(t, s, "m1", 2)
		v = cancelPlan(t, s, v.ID)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		m1, _ := s.Machine(ctx, "m1")
		if st := v.Steps[0]; st.State == models.StepSent {
			t.Fatalf("cancelled plan's step of m1 is %q (generation %d), awaiting a report its host gave before the cancel (applied generation %d, running build 2); plan: %q",
				st.State, st.Generation, m1.AppliedGeneration, v.Reason)
		}
	})
}
