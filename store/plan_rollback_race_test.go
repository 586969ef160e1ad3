package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
)

// rollbackRacingANewerPlan: plan 1 (build 2) of module mod halts on its
// canary m1, and instance a rolls it back (roll) while a person creates
// the plan of build 3 through instance b at the moment a's rollback writes
// the plan. DESIGN: "a pin a plan's rollback set is lifted by the newer
// plan". On PostgreSQL the new plan read m1's assignment before the
// rollback's pin was committed: it reached m1 (its step sent, build 3 its
// target) while the pin held m1 on build 1, and once its deadline passed
// it halted saying m1 never reported a generation m1 had applied.
func rollbackRacingANewerPlan(t *testing.T, policy bool, roll func(t *testing.T, a *store.Store, plan int64)) {
	twoInstances(t, func(t *testing.T, a, b *store.Store) {
		ctx := context.Background()
		for _, m := range planFixture(t, a) {
			applied(t, a, m.Name, 1)
		}
		if policy {
			if err := a.DB().Model(&models.Module{}).Where("name = ?", "mod").Update("on_failure", models.OnFailureRollback).Error; err != nil {
				t.Fatal(err)
			}
		}
		v, err := a.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		m1, _ := a.Machine(ctx, "m1")
		sentReport(t, a, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeRefused, Reason: "escape: /x"})
		var errB error
		var vb *models.PlanView
		wait := atMoment(t, a, false, updateOf("plans", models.PlanRolledBack), func() {
			vb, errB = b.CreatePlan(ctx, "user:olga", "mod", 3, 0, "")
		})
		roll(t, a, v.ID)
		wait()
		if errB != nil {
			t.Fatal(errB)
		}
		nv, err := a.Plan(ctx, vb.ID)
		if err != nil {
			t.Fatal(err)
		}
		as, _, err := a.Assignments(ctx, "m1")
		if err != nil {
			t.Fatal(err)
		}
		m1, _ = a.Machine(ctx, "m1")
		got := composedBuild(t, a, m1)
		if nv.State == models.PlanRunning && nv.Steps[0].Machine == "m1" && nv.Steps[0].State == models.StepSent && got != 3 {
			pin := int64(0)
			if as[0].Build != nil {
				pin = *as[0].Build
			}
			t.Fatalf("plan %d of build 3 reached m1 (step sent), yet m1 is pinned to build %d by %q and composed build %d", nv.ID, pin, as[0].Reason, got)
		}
	})
}

func TestPlans_APersonsRollbackWhileANewerPlanBegins(t *testing.T) {
	rollbackRacingANewerPlan(t, false, func(t *testing.T, a *store.Store, plan int64) {
		stepPlans(t, a)
		if v, _ := a.Plan(context.Background(), plan); v.State != models.PlanHalted {
			t.Fatalf("plan %d: %s, want halted", plan, v.State)
		}
		if _, err := a.SetPlanState(context.Background(), "user:ann", plan, "rollback"); err != nil {
			t.Logf("the rollback: %v", err)
		}
	})
}

func TestPlans_OnFailureRollbackWhileANewerPlanBegins(t *testing.T) {
	rollbackRacingANewerPlan(t, true, func(t *testing.T, a *store.Store, _ int64) {
		stepPlans(t, a)
	})
}
