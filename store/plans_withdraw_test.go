package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_CancelKeepsABuildAppliedBeforeALaterHeldBackGeneration: the
// plan of build 4 (no resources) reaches m1, whose host applies the
// step's generation in full. A later change (module web, content needing
// schema 2) composes m1's next generation held back: what it last
// applied, build 4 included. Its host applies that. The plan is then
// cancelled: m1's host applied build 4, so it keeps it (after its host is
// upgraded too), as TestPlan_CancelKeepsABuildOfNoResourcesItsHostApplied
// says of a host that applied it. Judged by the declaration it last
// applied (held back), it was taken back.
func TestPlan_CancelKeepsABuildAppliedBeforeALaterHeldBackGeneration(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		v, c := emptyBuildApplied(t, s)
		certModule(t, s)
		m1, _ := s.Machine(ctx, "m1")
		g := m1.Generation
		if _, err := s.SetAssignments(ctx, "user:admin", "m1", &g, []models.AssignmentView{{Module: "mod"}, {Module: "web"}}); err != nil {
			t.Fatal(err)
		}
		held := composeMachine(t, s, m1.ID)
		if held.HeldBack == "" {
			t.Fatal("not held back")
		}
		sentReport(t, s, m1.ID, &models.Report{Generation: held.Generation, Digest: held.Digest, Outcome: models.OutcomeApplied, HostVersion: "1.0.0"})
		v = cancelPlan(t, s, v.ID)
		// Its host is upgraded to one decoding schema 2: nothing held back.
		if err := s.RecordHostInfo(ctx, m1.ID, "1.5.0", "1,2"); err != nil {
			t.Fatal(err)
		}
		m1, _ = s.Machine(ctx, "m1")
		got := composeMachine(t, s, m1.ID)
		p := payloadOf(t, got)
		for _, r := range p.Resources {
			if r.Module == "mod" && r.Build < 4 {
				t.Fatalf("m1's host applied build 4 in full (generation %d), then generation %d held back (its content: what it applied); after the cancel (%q; m1's step %s: %q) and its host's upgrade it is composed generation %d with build %d's resource %s again",
					c.Generation, held.Generation, v.Reason, v.Steps[0].State, v.Steps[0].Reason, got.Generation, r.Build, r.Path)
			}
		}
	})
}

// TestPlan_CancelAfterAPersonsPinTakesTheTargetBack: the plan of build
// 2 reaches m1; before its host applies it, a person pins m1 to build 1
// (with a reason). Its host applies the pin's generation, running build 1.
// The plan is cancelled: m1's host never applied build 2, so its step is
// not "applied" and its target is taken back; once the person lifts the
// pin, m1 is not composed the cancelled plan's build 2. Judged by its
// applied generation alone, its step said applied, and the target stayed.
func TestPlan_CancelAfterAPersonsPinTakesTheTargetBack(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		v := canaryOfBuild2(t, s)
		pinTo(t, s, "m1", 1)
		applied(t, s, "m1", 1)
		v = cancelPlan(t, s, v.ID)
		step := v.Steps[0]
		assignTo(t, s, "m1", "mod") // the pin lifted
		m1, _ := s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 1 || step.State == models.StepApplied {
			t.Fatalf("m1 was pinned to build 1 before its host applied plan %d's build 2, and its host runs build 1; the plan was cancelled (%q), m1's step says %s (%q), and once the pin is lifted m1 is composed build %d",
				v.ID, v.Reason, step.State, step.Reason, b)
		}
	})
}
