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
		v, c := emptyBuildApplied(t, s)
		v = cancelPlan(t, s, v.ID)
		m1, _ := s.Machine(ctx, "m1")
		for _, r := range payloadOf(t, composeMachine(t, s, m1.ID)).Resources {
			if r.Module == "mod" && r.Build < 4 {
				t.Fatalf("m1's host applied build 4 (generation %d, applied %d); after the cancel (%q; m1's step %s: %q) it is composed generation %d with build %d's resource %s (%s) again",
					c.Generation, m1.AppliedGeneration, v.Reason, v.Steps[0].State, v.Steps[0].Reason, m1.Generation, r.Build, r.ID, r.Path)
			}
		}
	})
}

// emptyBuildApplied is a plan of build 4 of mod, a build of no resources
// (it takes away every file of builds 1-3), whose canary m1's host
// applied the step's generation, not held back: it then runs nothing of
// mod, so its report's running names no mod (omitempty: no running at
// all), as a host's state says, a module running only through its
// resources. c is that generation.
func emptyBuildApplied(t *testing.T, s *store.Store) (*models.PlanView, *models.Composed) {
	t.Helper()
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
	if c.HeldBack != "" {
		t.Fatalf("step generation held back: %s", c.HeldBack)
	}
	sentReport(t, s, m1.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied, HostVersion: "1.0.0"})
	return v, c
}
