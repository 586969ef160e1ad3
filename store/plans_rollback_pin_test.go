package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_RollbackKeepsAPersonsPin: the canary m1 applies build 2 and
// the plan goes on to m2 and m3. A person then pins m1 to build 3 with a
// reason (a hotfix only it needs). m2 refuses build 2: the plan halts, and
// is rolled back. The rollback overwrote the person's pin: m1 was pinned
// to build 1 "rollback of plan 1" and composed build 1, the person's
// choice gone from the record. It is left as the person pinned it.
func TestPlan_RollbackKeepsAPersonsPin(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, v := planOfBuild2(t, s)
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		pinTo(t, s, "m1", 3) // reason "hold"
		m2, _ := s.Machine(ctx, "m2")
		sentReport(t, s, m2.ID, &models.Report{Generation: m2.Generation, Outcome: models.OutcomeRefused, Reason: "escape: /x"})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("plan: %s %q", v.State, v.Reason)
		}
		v, err := s.SetPlanState(ctx, "user:olga", v.ID, "rollback")
		if err != nil {
			t.Fatal(err)
		}
		as, _, _ := s.Assignments(ctx, "m1")
		m1, _ := s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 3 || as[0].Build == nil || *as[0].Build != 3 {
			t.Fatalf("m1, pinned by a person to build 3 (reason \"hold\"), is after the rollback assigned build %v reason %q and composed build %d; rollback: %q",
				*as[0].Build, as[0].Reason, b, v.Reason)
		}
	})
}
