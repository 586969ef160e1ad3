package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_CancelTakesBackABuildAHeldBackHostNeverApplied: a plan of build
// 2 (content needing schema 2) reaches m1, whose host decodes only schema
// 1: its generation is composed held back (what it last applied, build 1),
// its host applies that, and the plan halts on it. The plan is cancelled:
// m1's host never applied build 2, so its target is to be taken back. It
// was not (its applied generation is the step's, held back or not): once
// its host was upgraded, m1 was composed build 2 of the cancelled plan.
func TestPlan_CancelTakesBackABuildAHeldBackHostNeverApplied(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1") // mod build 1, host 1.0.0 decoding 1
		c := composeMachine(t, s, m.ID)
		sentReport(t, s, m.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied,
			HostVersion: "1.0.0", Running: map[string]models.RunningBuild{"mod": {Build: 1}}})
		release(t, s, "1.5.0", "amd64", "1,2")
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: certManifest}, nil); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.State != models.PlanRunning {
			t.Fatalf("plan: %+v %v", v, err)
		}
		held := composeMachine(t, s, m.ID)
		if held.HeldBack == "" {
			t.Fatal("not held back")
		}
		sentReport(t, s, m.ID, &models.Report{Generation: held.Generation, Digest: held.Digest, Outcome: models.OutcomeApplied,
			HostVersion: "1.0.0", Running: map[string]models.RunningBuild{"mod": {Build: 1}}})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("plan %s %q", v.State, v.Reason)
		}
		v = cancelPlan(t, s, v.ID)
		if err := s.RecordHostInfo(ctx, m.ID, "1.5.0", "1,2"); err != nil {
			t.Fatal(err)
		}
		mm, _ := s.Machine(ctx, "m1")
		if b := composedBuild(t, s, mm); b != 1 {
			t.Fatalf("plan cancelled (%q; m1's step %s: %q); m1 never ran build 2 (it applied generation %d held back, running build 1), and after its host's upgrade is composed build %d",
				v.Reason, v.Steps[0].State, v.Steps[0].Reason, held.Generation, b)
		}
	})
}
