package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_CancelKeepsABuildOfNoResourcesItsHostApplied: build 4 of mod
// takes away every resource of builds 1-3 (a module's files removed).
// Its plan's canary m1 applies it: its host then runs nothing of mod, so
// its report's running names no mod (as a host's state says: a module is
// running only through its resources). The plan is cancelled. m1's host
// applied build 4; it keeps it, as any machine whose host applied the
// cancelled build does. It was taken back, judged by what its host runs:
// its step withdrawn, its target removed, and m1 composed build 1 again —
// older content than its host applied, its removed files put back.
func TestPlan_CancelKeepsABuildOfNoResourcesItsHostApplied(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: `{"resources": []}`}, nil); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 4, 0, "")
		if err != nil || v.State != models.PlanRunning || v.Steps[0].State != models.StepSent {
			t.Fatalf("plan: %+v %v", v, err)
		}
		if b4, err := s.Build(ctx, "mod", 4); err != nil || b4.Manifest != `{"resources": []}` {
			t.Fatalf("build 4: %+v %v", b4, err)
		}
		m1, _ := s.Machine(ctx, "m1")
		c := composeMachine(t, s, m1.ID)
		// What the host reports once it applied build 4: it runs nothing
		// of mod (omitempty: no running at all).
		sentReport(t, s, m1.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied})
		v, err = s.SetPlanState(ctx, "user:olga", v.ID, "cancel")
		if err != nil || v.State != models.PlanCancelled {
			t.Fatalf("cancel: %+v %v", v, err)
		}
		m1, _ = s.Machine(ctx, "m1")
		got := composeMachine(t, s, m1.ID)
		var env models.Envelope
		var p models.DeclarationPayload
		decode(t, got.Sealed(), &env)
		decode(t, env.Payload, &p)
		for _, r := range p.Resources {
			if r.Module == "mod" && r.Build < 4 {
				t.Fatalf("m1's host applied build 4 (generation %d, applied %d); after the cancel (%q; m1's step %s: %q) it is composed generation %d with build %d's resource %s (%s) again",
					c.Generation, m1.AppliedGeneration, v.Reason, v.Steps[0].State, v.Steps[0].Reason, m1.Generation, r.Build, r.ID, r.Path)
			}
		}
	})
}
