package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_ANewerBuildMadeCurrentSupersedesIt: a plan of build 2 runs, its
// canary applied; a person makes build 3 current. The plan went on to its
// next tier, judged m2 and m3 applied by build 3, which they ran, and
// ended "done" with "plan 1: build 2 is current" on the record while build
// 3 was.
func TestPlan_ANewerBuildMadeCurrentSupersedesIt(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.State != models.PlanRunning {
			t.Fatalf("plan: %+v %v", v, err)
		}
		applied(t, s, "m1", 2)
		if _, err := s.SetCurrent(ctx, "user:olga", "mod", 3, ""); err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		for _, n := range []string{"m2", "m3"} {
			applied(t, s, n, 3)
		}
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanSuperseded || !strings.Contains(v.Reason, "build 3 was made current by user:olga") {
			t.Fatalf("plan %s %q; want superseded by build 3", v.State, v.Reason)
		}
		for _, st := range v.Steps {
			if st.Tier > 0 && st.State != models.StepWithdrawn {
				t.Fatalf("step %s of tier %d %s %q: the plan went on past the newer build", st.Machine, st.Tier, st.State, st.Reason)
			}
		}
		es, _ := s.AuditEventsWhere(ctx, 50, 0, models.AuditFilter{Target: "module/mod"})
		var said []string
		for _, e := range es {
			if strings.Contains(e.Detail, "build 2 is current") {
				t.Fatalf("the record says build 2 is current: %s %q", e.Action, e.Detail)
			}
			said = append(said, e.Action+": "+e.Detail)
		}
		if !strings.Contains(strings.Join(said, "\n"), "plan(s) 1 of it or older builds superseded") {
			t.Fatalf("the change of current build does not say it superseded plan 1:\n%s", strings.Join(said, "\n"))
		}
		if mod, _ := s.Module(ctx, "mod"); *mod.CurrentBuild != 3 {
			t.Fatalf("current build %d", *mod.CurrentBuild)
		}
	})
}

// TestPlan_AllMachinesPinnedBeforeThePlanWaitsBeforeCurrent: as
// TestPlan_NoMachineTookItWaitsBeforeCurrent, but a person pinned every
// machine of the module before the plan was made, so it had no step: it
// ended "done" at once and made current a build no machine tried. Resumed,
// it makes it current as a person's choice.
func TestPlan_AllMachinesPinnedBeforeThePlanWaitsBeforeCurrent(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		v := pinnedPlan(t, s, 1, 1, 1)
		v, _ = s.Plan(ctx, v.ID)
		mod, _ := s.Module(ctx, "mod")
		if v.State != models.PlanPaused || !strings.HasPrefix(v.Reason, models.UntriedTierPause) || !strings.Contains(v.Reason, "m1, m2, m3") ||
			*mod.CurrentBuild == 2 {
			t.Fatalf("plan %s %q with %d steps; module's current build %d", v.State, v.Reason, len(v.Steps), *mod.CurrentBuild)
		}
		stepPlans(t, s)
		seen := int64(0)
		if _, err := s.ActOnPlan(ctx, "user:olga", v.ID, models.PlanResume, models.PlanSeen{Tier: &seen}); err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		mod, _ = s.Module(ctx, "mod")
		if v.State != models.PlanDone || *mod.CurrentBuild != 2 {
			t.Fatalf("resumed: plan %s %q; current build %d", v.State, v.Reason, *mod.CurrentBuild)
		}
	})
}

// TestPlan_AnEndedPlanActedOnAtATierSaysItEnded: resuming a plan that is
// done, naming the tier it was read at, said it "has moved on since it
// was read (at tier 1 of 1): it is now done at tier 1 of 1" — moved on
// from the tier it is at. It says the plan is done. And a plan of an older
// build made after it says the done plan rolled its build out, not that it
// "rolls out" still.
func TestPlan_AnEndedPlanActedOnAtATierSaysItEnded(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		applied(t, s, "m2", 2)
		applied(t, s, "m3", 2)
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanDone {
			t.Fatalf("plan %s %q", v.State, v.Reason)
		}
		seen := int64(1) // its last tier, "tier 2 of 2" as it is shown done
		_, err = s.ActOnPlan(ctx, "user:olga", v.ID, models.PlanResume, models.PlanSeen{Tier: &seen})
		if !errors.Is(err, models.ErrConflict) || !strings.Contains(err.Error(), "is done; cannot resume it") || strings.Contains(err.Error(), "moved on") {
			t.Fatalf("resume of a done plan at its tier: %v", err)
		}
		older, err := s.CreatePlan(ctx, "test", "mod", 1, 0, "")
		if err != nil || older.State != models.PlanSuperseded {
			t.Fatalf("plan of build 1: %+v %v", older, err)
		}
		if older.Reason != fmt.Sprintf("superseded: plan %d rolled out build 2, newer than 1", v.ID) {
			t.Fatalf("plan of build 1: %q", older.Reason)
		}
	})
}

// TestPlan_AllPinnedToItsOwnBuildWaitsForThemToRunIt: a person pinned
// every machine to the plan's own build before it began: it paused "build
// 2 reached none of module mod's machines" and stayed so once their hosts
// ran it. It waits, running, and is done once one runs it.
func TestPlan_AllPinnedToItsOwnBuildWaitsForThemToRunIt(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		v := pinnedPlan(t, s, 2, 2, 2)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning || !strings.Contains(v.Reason, "waiting: ") || !strings.Contains(v.Reason, "m1, m2, m3") {
			t.Fatalf("before any host runs build 2: plan %s %q", v.State, v.Reason)
		}
		applied(t, s, "m2", 2)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		mod, _ := s.Module(ctx, "mod")
		if v.State != models.PlanDone || v.Reason != "" || *mod.CurrentBuild != 2 {
			t.Fatalf("m2 runs build 2: plan %s %q; current build %d", v.State, v.Reason, *mod.CurrentBuild)
		}
	})
}

// TestAssignments_EmptiedThenTheKeptModuleGetsABuild: emptied on purpose
// while a selector kept web (no build yet) on it, m1 was marked empty_ok;
// web's first build then ran on it, and the flag stayed: a later empty
// declaration (the module's builds gone, a store restored) would have been
// taken for a person's choice and torn web down.
func TestAssignments_EmptiedThenTheKeptModuleGetsABuild(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "web", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		g := mustMachine(t, s, "m1").Generation
		if _, err := s.SetLabels(ctx, "test", "m1", &g, map[string]string{"role": "web"}, false); err != nil {
			t.Fatal(err)
		}
		selectWeb(t, s, "role=web", false)
		g = mustMachine(t, s, "m1").Generation
		if _, err := s.SetAssignments(ctx, "user:olga", "m1", &g, []models.AssignmentView{}); err != nil {
			t.Fatal(err)
		}
		if !mustMachine(t, s, "m1").EmptyOK {
			t.Fatal("m1, emptied, is not empty_ok")
		}
		if err := s.CreateBuild(ctx, "test", "web", &models.Build{Manifest: manifest}, nil); err != nil {
			t.Fatal(err)
		}
		if mod, _ := s.Module(ctx, "web"); mod.CurrentBuild == nil {
			t.Fatal("web's first build is not current")
		}
		if mustMachine(t, s, "m1").EmptyOK {
			t.Fatal("m1 runs web's build, yet is still marked empty on purpose")
		}
	})
}

// TestPlan_AWaitingPlanWhoseMachinesChangeUnderIt: a plan without steps
// (every machine pinned to its build when it began) waits. Its machines
// unpinned, it found no pinned machine and ended done, making its build
// current untried; its build made current by a person, it went on
// "waiting" to become current, for good if no host reported; paused
// untried, it went on asking a person to make current what was.
func TestPlan_AWaitingPlanWhoseMachinesChangeUnderIt(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		t.Run("Unpinned", func(t *testing.T) {
			v := pinnedPlan(t, s, 2, 2, 2)
			for _, n := range []string{"m1", "m2", "m3"} {
				g := mustMachine(t, s, n).Generation
				if _, err := s.SetAssignments(ctx, "user:admin", n, &g, []models.AssignmentView{{Module: "mod"}}); err != nil {
					t.Fatal(err)
				}
			}
			stepPlans(t, s)
			v, _ = s.Plan(ctx, v.ID)
			mod, _ := s.Module(ctx, "mod")
			if v.State != models.PlanPaused || !strings.HasPrefix(v.Reason, models.UntriedTierPause) || *mod.CurrentBuild != 1 {
				t.Fatalf("unpinned, no machine having run build 2: plan %s %q; current build %d", v.State, v.Reason, *mod.CurrentBuild)
			}
		})
	})
	t.Run("MadeCurrent", func(t *testing.T) {
		storetest.Dialects(t, func(t *testing.T, s *store.Store) {
			ctx := context.Background()
			v := pinnedPlan(t, s, 2, 2, 2)
			if _, err := s.SetCurrent(ctx, "user:olga", "mod", 2, ""); err != nil {
				t.Fatal(err)
			}
			stepPlans(t, s)
			if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanSuperseded || v.Reason != "superseded: build 2 was made current by user:olga" {
				t.Fatalf("build 2 made current by a person: plan %s %q", v.State, v.Reason)
			}
		})
	})
}

// TestAssignments_EmptiedMachinesStayEmptyOnPurpose: a person empties m1
// while a selector keeps on it a module whose build declares nothing: its
// declaration was empty without empty_ok (the module counted, having a
// build). Emptied, then given a module with no build by a label change,
// the flag was cleared: its host refused the person's emptying while the
// last services ran on.
func TestAssignments_EmptiedMachinesStayEmptyOnPurpose(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		for _, mod := range []string{"web", "nothing"} {
			if err := s.CreateModule(ctx, "test", &models.Module{Name: mod, Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.CreateBuild(ctx, "test", "nothing", &models.Build{Manifest: `{"resources": []}`}, nil); err != nil {
			t.Fatal(err)
		}
		for mod, sel := range map[string]string{"web": "role=web", "nothing": "role=nothing"} {
			m, err := s.Module(ctx, mod)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.UpdateModule(ctx, "test", mod, m.ETag(), false, func(m *models.Module) error { m.Selector = sel; return nil }); err != nil {
				t.Fatal(err)
			}
		}
		label := func(name, role string) {
			g := mustMachine(t, s, name).Generation
			if _, err := s.SetLabels(ctx, "test", name, &g, map[string]string{"role": role}, false); err != nil {
				t.Fatal(err)
			}
		}
		empty := func(name string) {
			g := mustMachine(t, s, name).Generation
			if _, err := s.SetAssignments(ctx, "user:olga", name, &g, []models.AssignmentView{}); err != nil {
				t.Fatal(err)
			}
		}
		label("m1", "nothing")
		empty("m1")
		empty("m2")
		label("m2", "web")
		for _, n := range []string{"m1", "m2"} {
			m := mustMachine(t, s, n)
			got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl", newSigner())
			if err != nil || fails[m.ID] != nil {
				t.Fatalf("compose %s: %v %v", n, err, fails[m.ID])
			}
			var env models.Envelope
			var p models.DeclarationPayload
			decode(t, got[m.ID].Sealed(), &env)
			decode(t, env.Payload, &p)
			if len(p.Resources) != 0 || !p.EmptyOK {
				t.Fatalf("%s, emptied by a person: %d resource(s), empty_ok %v", n, len(p.Resources), p.EmptyOK)
			}
		}
	})
}

// TestPlan_APlanWithoutStepsNeverWaitsOnWhatIsGone: paused untried (every
// machine pinned to build 1 when it began), a plan of build 2 whose build
// a person then made current stayed paused, asking to be resumed to make
// it current; waiting on a machine pinned to its build that was then
// revoked, it waited for good.
func TestPlan_APlanWithoutStepsNeverWaitsOnWhatIsGone(t *testing.T) {
	t.Run("MadeCurrent", func(t *testing.T) {
		storetest.Dialects(t, func(t *testing.T, s *store.Store) {
			ctx := context.Background()
			v := pinnedPlan(t, s, 1, 1, 1)
			if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanPaused {
				t.Fatalf("plan %s %q", v.State, v.Reason)
			}
			if _, err := s.SetCurrent(ctx, "user:olga", "mod", 2, ""); err != nil {
				t.Fatal(err)
			}
			stepPlans(t, s)
			if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanSuperseded {
				t.Fatalf("build 2 made current by a person: plan %s %q", v.State, v.Reason)
			}
		})
	})
	t.Run("Revoked", func(t *testing.T) {
		storetest.Dialects(t, func(t *testing.T, s *store.Store) {
			ctx := context.Background()
			v := pinnedPlan(t, s, 2, 1, 1)
			if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning || !strings.Contains(v.Reason, "waiting: ") {
				t.Fatalf("plan %s %q", v.State, v.Reason)
			}
			if _, err := s.RevokeMachine(ctx, "user:admin", "m1", "disk sold"); err != nil {
				t.Fatal(err)
			}
			stepPlans(t, s)
			if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanPaused || !strings.HasPrefix(v.Reason, models.UntriedTierPause) || strings.Contains(v.Reason, "m1") {
				t.Fatalf("m1, pinned to build 2, revoked: plan %s %q", v.State, v.Reason)
			}
		})
	})
}

// pinnedPlan has a person pin m1, m2 and m3 to the builds given, in that
// order, then makes a plan of build 2 (which has no step: every machine is
// pinned) and steps it once.
func pinnedPlan(t *testing.T, s *store.Store, m1, m2, m3 int64) *models.PlanView {
	t.Helper()
	planFixture(t, s)
	for n, b := range map[string]int64{"m1": m1, "m2": m2, "m3": m3} {
		pinTo(t, s, n, b)
	}
	v, err := s.CreatePlan(context.Background(), "test", "mod", 2, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	stepPlans(t, s)
	return v
}
