package store_test

import (
	"context"
	"errors"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// haltedThenNewer: plan A of build 2 halts on its canary m1 (refused);
// plan B of build 3 is made while A is halted, and reaches m1, which
// applies build 3.
func haltedThenNewer(t *testing.T, s *store.Store) (ms []*models.Machine, a, b *models.PlanView) {
	t.Helper()
	ctx := context.Background()
	ms, a = planOfBuild2(t, s)
	m1, _ := s.Machine(ctx, "m1")
	sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeRefused, Reason: "escape: /x"})
	stepPlans(t, s)
	if a, _ = s.Plan(ctx, a.ID); a.State != models.PlanHalted {
		t.Fatalf("plan A: %s %q", a.State, a.Reason)
	}
	b, err := s.CreatePlan(ctx, "test", "mod", 3, 0, "")
	if err != nil || b.State != models.PlanRunning {
		t.Fatalf("plan B: %+v %v", b, err)
	}
	return ms, a, b
}

// TestPlan_RollbackOfAnOlderHaltedPlanTakesBackANewerPlansBuild: the
// rollback of halted plan A (build 2), done after plan B (build 3)
// reached m1 and finished, pinned m1 to build 1: m1, which runs build 3
// (the module's current build, made so by B), was sent build 1, and stayed
// pinned there though "a newer build's plan lifts such a pin". A halted
// plan is now superseded by a newer one, as a running one is: it is not
// rolled back after.
func TestPlan_RollbackOfAnOlderHaltedPlanTakesBackANewerPlansBuild(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms, a, b := haltedThenNewer(t, s)
		applied(t, s, "m1", 3)
		stepPlans(t, s)
		applied(t, s, "m2", 3)
		applied(t, s, "m3", 3)
		stepPlans(t, s)
		b, _ = s.Plan(ctx, b.ID)
		mod, _ := s.Module(ctx, "mod")
		if b.State != models.PlanDone || *mod.CurrentBuild != 3 {
			t.Fatalf("plan B: %s %q, current %d", b.State, b.Reason, *mod.CurrentBuild)
		}
		if a, _ = s.Plan(ctx, a.ID); a.State != models.PlanSuperseded {
			t.Fatalf("plan A of build 2, halted when plan B of build 3 began: %s %q", a.State, a.Reason)
		}
		if _, err := s.SetPlanState(ctx, "user:olga", a.ID, "rollback"); !errors.Is(err, models.ErrConflict) {
			t.Fatalf("rollback of A, superseded: %v", err)
		}
		m1, _ := s.Machine(ctx, "m1")
		if got := composedBuild(t, s, m1); got != 3 {
			as, _, _ := s.Assignments(ctx, "m1")
			t.Fatalf("m1 runs build 3 (current, plan B done) and is composed build %d after the rollback of plan A of build 2; its assignment: build %v %q",
				got, *as[0].Build, as[0].Reason)
		}
		_ = ms
	})
}

// TestPlan_ResumeOfAnOlderHaltedPlanSendsASupersededBuild: plan A (build
// 2) halted on its canary m1; plan B (build 3) is running. A plan of build
// 2 made now is superseded at once ("never send an older build"), but a
// person's resume of A was not: once m1 applied B's build 3, A counted that
// as its canary passing and reached m2 with build 2 — the build its canary
// refused and B overtook — which m2 was then sent. A is superseded by B
// now, and is not resumed.
func TestPlan_ResumeOfAnOlderHaltedPlanSendsASupersededBuild(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, a, b := haltedThenNewer(t, s)
		if late, err := s.CreatePlan(ctx, "test", "mod", 2, 0, ""); err != nil || late.State != models.PlanSuperseded {
			t.Fatalf("a new plan of build 2: %+v %v", late, err)
		}
		if _, err := s.SetPlanState(ctx, "user:olga", a.ID, "resume"); !errors.Is(err, models.ErrConflict) {
			t.Fatalf("resume of A, superseded: %v", err)
		}
		applied(t, s, "m1", 3)
		// A worker's look at plan A (the older id is stepped first).
		if err := s.StepPlan(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		v, _ := s.Plan(ctx, a.ID)
		b, _ = s.Plan(ctx, b.ID)
		m2, _ := s.Machine(ctx, "m2")
		if got := composedBuild(t, s, m2); got == 2 {
			t.Fatalf("plan B of build 3 is %s at tier %d; plan A of build 2, resumed, is %s at tier %d, its canary step %s (m1 refused build 2 and runs 3); m2 is composed build %d",
				b.State, b.Tier+1, v.State, v.Tier+1, v.Steps[0].State, got)
		}
	})
}
