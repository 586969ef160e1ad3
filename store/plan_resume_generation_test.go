package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_ResumedStepNamesTheGenerationItsHostApplied: the canary's
// generation cannot be composed (a variable missing), so the plan halts;
// the operator sets the variable (a new generation, which carries the
// plan's build) and resumes; the host applies that generation. The step
// said it applied the generation that was never composed nor sent.
func TestPlan_ResumedStepNamesTheGenerationItsHostApplied(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		m1, _ := s.Machine(ctx, "m1")
		stuck := m1.Generation
		if err := s.DB().Exec("UPDATE machines SET compose_error = ?, compose_error_generation = ? WHERE id = ?", "variables: ${var.port} is not set", stuck, m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("plan %s %q", v.State, v.Reason)
		}
		// The operator fixes the variable: a new generation, composable.
		if _, err := s.SetVariables(ctx, "user:admin", "m1", &m1.Generation, map[string]string{"port": "80"}); err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Exec("UPDATE machines SET compose_error = '', compose_error_generation = 0 WHERE id = ?", m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetPlanState(ctx, "user:admin", v.ID, "resume"); err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 2)
		m1, _ = s.Machine(ctx, "m1")
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		for _, st := range v.Steps {
			if st.Machine != "m1" {
				continue
			}
			if st.State != models.StepApplied {
				t.Fatalf("m1's step: %+v", st)
			}
			if st.Generation == stuck {
				t.Fatalf("m1's step says it applied generation %d, which was never composed nor sent; its host applied %d", st.Generation, m1.AppliedGeneration)
			}
		}
	})
}
