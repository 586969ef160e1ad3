package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// madeCurrent has a person make build b of mod current (going back, with
// reason) and the named machines — m1, m2 and m3 when none is named —
// report applying it.
func madeCurrent(t *testing.T, s *store.Store, b int64, reason string, names ...string) {
	t.Helper()
	if _, err := s.SetCurrent(context.Background(), "user:olga", "mod", b, reason); err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		names = []string{"m1", "m2", "m3"}
	}
	for _, n := range names {
		applied(t, s, n, b)
	}
}

// goneBackFrom2: builds 1, 2 and 3 of mod; 2 made current and run by m1,
// m2 and m3, then the module gone back to 1 for a reason and run by all.
func goneBackFrom2(t *testing.T, s *store.Store) {
	t.Helper()
	planFixture(t, s)
	madeCurrent(t, s, 2, "")
	madeCurrent(t, s, 1, "build 2 leaks")
}

// goneBackFrom3WithM3Behind: build 3 current and run by all; gone back to
// 1 ("build 3 leaks"); m1 and m2 went back, m3 (offline) still runs 3.
func goneBackFrom3WithM3Behind(t *testing.T, s *store.Store) {
	t.Helper()
	planFixture(t, s)
	madeCurrent(t, s, 3, "")
	madeCurrent(t, s, 1, "build 3 leaks", "m1", "m2")
}

// TestGoneBack_CoversACancelledPlansBuild: going back covers every build
// there was then; a plan of build 3 made since and cancelled, whose host
// applied it as the cancel landed, is taken back from it: the person went
// back from 3, then cancelled what would have brought it.
func TestGoneBack_CoversACancelledPlansBuild(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		goneBackFrom2(t, s)
		v, err := s.CreatePlan(ctx, "user:olga", "mod", 3, 0, "")
		if err != nil || v.State != models.PlanRunning {
			t.Fatalf("plan: %v %+v", err, v)
		}
		m1, _ := s.Machine(ctx, "m1")
		held := m1.Generation // the canary's step: its host holds it
		if _, err := s.SetPlanState(ctx, "user:olga", v.ID, "cancel"); err != nil {
			t.Fatal(err)
		}
		sentReport(t, s, m1.ID, &models.Report{Generation: held, Outcome: "applied", Running: map[string]models.RunningBuild{"mod": {Build: 3}}})
		if b := composedBuild(t, s, m1); b != 1 {
			t.Fatalf("m1 runs build 3, gone back from, its plan cancelled: composed build %d", b)
		}
		if v, _ = s.Plan(ctx, v.ID); !strings.Contains(v.Steps[0].Reason, "and its module has not gone back from that build") {
			t.Fatalf("the cancelled step's words: %q", v.Steps[0].Reason)
		}
	})
}

// TestGoneBack_RefusedWhileANewerPlanMayReachMachines: going back while a
// plan of a newer build runs (or is paused or halted) is refused, naming
// the plan and what to do: the plan would go on reaching machines with
// the build the person left, and finish by making it current.
func TestGoneBack_RefusedWhileANewerPlanMayReachMachines(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		if _, err := s.SetCurrent(ctx, "user:olga", "mod", 2, ""); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "user:olga", "mod", 3, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.SetCurrent(ctx, "user:ivan", "mod", 1, "2 and 3 leak")
		if !errors.Is(err, models.ErrConflict) || !strings.Contains(err.Error(), "plan 1 of build 3 is running") {
			t.Fatalf("going back while plan %d runs: %v", v.ID, err)
		}
		if mod, _ := s.Module(ctx, "mod"); *mod.CurrentBuild != 2 || mod.CurrentReason != "" {
			t.Fatalf("a refused going back changed the module: current %d, reason %q", *mod.CurrentBuild, mod.CurrentReason)
		}
		if _, err := s.SetPlanState(ctx, "user:ivan", v.ID, "cancel"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetCurrent(ctx, "user:ivan", "mod", 1, "2 and 3 leak"); err != nil {
			t.Fatalf("going back once the plan is cancelled: %v", err)
		}
	})
}

// TestGoneBack_AReasonWithoutGoingBackIsNotKept: a reason given with a
// build that is no older than the current one is not kept: it would move
// machines back from then on, for no going back.
func TestGoneBack_AReasonWithoutGoingBackIsNotKept(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		if _, err := s.SetCurrent(ctx, "user:olga", "mod", 2, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetCurrent(ctx, "user:olga", "mod", 2, "just because"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetCurrent(ctx, "user:olga", "mod", 3, "forward"); err != nil {
			t.Fatal(err)
		}
		if mod, _ := s.Module(ctx, "mod"); mod.CurrentReason != "" || mod.CurrentBackFrom != 0 {
			t.Fatalf("no going back, yet current_reason %q (from %d) kept", mod.CurrentReason, mod.CurrentBackFrom)
		}
	})
}

// TestGoneBack_AMeshControllerModuleIsNotGoneBackOn: the control nodes
// would be moved to a controller that may not know the store.
func TestGoneBack_AMeshControllerModuleIsNotGoneBackOn(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "ctl", Kind: models.KindController, SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.CreateBuild(ctx, "test", "ctl", &models.Build{Manifest: manifest}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.SetCurrent(ctx, "test", "ctl", 2, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetCurrent(ctx, "test", "ctl", 1, "2 is bad"); !errors.Is(err, models.ErrConflict) || !strings.Contains(err.Error(), "mesh-controller module") {
			t.Fatalf("going back on a mesh-controller module: %v", err)
		}
	})
}

// TestGoneBack_JudgedOnTheCurrentBuildAsItIs: with two replicas, a plan
// finishing (current 1 → 3) while a person makes build 2 current is not
// read as going forward from 1: the module's row is locked, so build 2 is
// judged against 3 — going back, which needs a reason.
func TestGoneBack_JudgedOnTheCurrentBuildAsItIs(t *testing.T) {
	s := storetest.MustOpen(t, store.Postgres)
	ctx := context.Background()
	planFixture(t, s) // current 1; builds 2 and 3
	tx := s.DB().Begin()
	if err := tx.Exec("UPDATE modules SET current_build = 3 WHERE name = 'mod'").Error; err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.SetCurrent(ctx, "user:olga", "mod", 2, "")
		done <- err
	}()
	// The person's write waits on the module's row lock.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := s.DB().Raw("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() AND query ILIKE '%modules%'").Scan(&waiting).Error; err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			tx.Rollback()
			t.Fatal("the person's write never waited on the module's row")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit().Error; err != nil {
		t.Fatal(err)
	}
	var inv *models.InvalidError
	if err := <-done; !errors.As(err, &inv) || inv.Field != "reason" {
		mod, _ := s.Module(ctx, "mod")
		t.Fatalf("build 2 over 3 without a reason: %v (current now %d)", err, *mod.CurrentBuild)
	}
}

// TestGoneBack_APlanOfABuildInBetweenMovesOnlyWhatItReaches:
// build 3 made current by a person, run by all; gone back to 1 ("3
// leaks"); m3 is offline and still runs 3. A plan of build 2 (between)
// narrows current_back_from to 1 and so clears the going back whole: m3,
// running 3, which nobody chose anew, is never moved back — not by the
// plan (its target 2 is older than 3), not after it (current 2 < 3).
func TestGoneBack_APlanOfABuildInBetweenMovesOnlyWhatItReaches(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		goneBackFrom3WithM3Behind(t, s)
		v, err := s.CreatePlan(ctx, "user:ivan", "mod", 2, 0, "")
		if err != nil || v.State != models.PlanRunning {
			t.Fatalf("plan of 2: %v %+v", err, v)
		}
		if mod, _ := s.Module(ctx, "mod"); mod.CurrentReason != "build 3 leaks" || mod.CurrentBackFrom != 3 {
			t.Fatalf("the plan of 2 changed the going back: reason %q, from %d", mod.CurrentReason, mod.CurrentBackFrom)
		}
		applied(t, s, "m1", 2)
		stepPlans(t, s) // tier 2 (m2, m3) reached with build 2
		m3, _ := s.Machine(ctx, "m3")
		if b := composedBuild(t, s, m3); b != 2 {
			t.Fatalf("m3, on build 3 gone back from, reached by the plan of 2: composed build %d", b)
		}
	})
}

// TestGoneBack_ABuildInBetweenIsNotSupersededByOneGoneBackFrom:
// build 3 rolled out by a plan (done), gone back to 1 for a reason; a
// person then plans build 2. It is "superseded: plan 1 already rolls out
// build 3", a done plan of the build the person went back from: build 2
// can never be rolled out by a plan, and the state word is not true.
func TestGoneBack_ABuildInBetweenIsNotSupersededByOneGoneBackFrom(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		p3, err := s.CreatePlan(ctx, "test", "mod", 3, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 3)
		stepPlans(t, s)
		applied(t, s, "m2", 3)
		applied(t, s, "m3", 3)
		stepPlans(t, s)
		if p3, _ = s.Plan(ctx, p3.ID); p3.State != models.PlanDone {
			t.Fatalf("plan of 3: %s %s", p3.State, p3.Reason)
		}
		if _, err := s.SetCurrent(ctx, "user:olga", "mod", 1, "build 3 leaks"); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "user:ivan", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if v.State != models.PlanRunning {
			t.Fatalf("plan of build 2 after going back from 3 to 1: %s (%s)", v.State, v.Reason)
		}
	})
}

// TestGoneBack_LiftsAPlanRollbacksPin: build 2
// current and run by all; a plan of 3 halts on its canary m1 and is
// rolled back (m1 pinned to 2, pin_plan). A person then goes back to 1
// because build 2 leaks: m1 stays on 2, the build gone back from, held
// by the controller's rollback pin, and SetCurrent does not say so.
func TestGoneBack_LiftsAPlanRollbacksPin(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		madeCurrent(t, s, 2, "")
		v, err := s.CreatePlan(ctx, "test", "mod", 3, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		m1, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeFailed, Reason: "exec format error"})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("plan %s", v.State)
		}
		if _, err := s.SetPlanState(ctx, "user:olga", v.ID, "rollback"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetCurrent(ctx, "user:olga", "mod", 1, "build 2 leaks"); err != nil {
			t.Fatal(err)
		}
		m1, _ = s.Machine(ctx, "m1")
		if evs, _ := s.AuditEventsWhere(ctx, 10, 0, models.AuditFilter{Target: "machine/m1"}); len(evs) == 0 || evs[0].Action != "unpin" {
			t.Fatalf("the lifted pin is not on m1's record: %+v", evs)
		}
		if b := composedBuild(t, s, m1); b != 1 {
			t.Fatalf("gone back from 2 to 1, m1 (pinned to 2 by plan %d's rollback) composed build %d", v.ID, b)
		}
	})
}

// TestGoneBack_APlanRollbackDoesNotPinABuildGoneBackFrom: a plan of build
// 2 made since reached m3, still on 3 (gone back from, offline then),
// halted and was rolled back: the rollback pinned m3 to the build it ran
// before, 3, with a reason, and held it there for good. It pins it to the
// current build instead, saying so.
func TestGoneBack_APlanRollbackDoesNotPinABuildGoneBackFrom(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		goneBackFrom3WithM3Behind(t, s)
		v, err := s.CreatePlan(ctx, "user:ivan", "mod", 2, 0, "")
		if err != nil || v.State != models.PlanRunning {
			t.Fatalf("plan of 2: %v %+v", err, v)
		}
		applied(t, s, "m1", 2)
		stepPlans(t, s) // tier 2: m2, m3 reached with 2
		m3, _ := s.Machine(ctx, "m3")
		sentReport(t, s, m3.ID, &models.Report{Generation: m3.Generation, Outcome: "failed", Reason: "disk full",
			Running: map[string]models.RunningBuild{"mod": {Build: 3}}})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("plan: %s %s", v.State, v.Reason)
		}
		if _, err := s.SetPlanState(ctx, "user:ivan", v.ID, "rollback"); err != nil {
			t.Fatal(err)
		}
		if v, _ = s.Plan(ctx, v.ID); !strings.Contains(v.Reason, "m3 ran build 3 before, which the module went back from: pinned to the current build 1") {
			t.Fatalf("the rollback's words: %q", v.Reason)
		}
		m3, _ = s.Machine(ctx, "m3")
		if b := composedBuild(t, s, m3); b == 3 {
			t.Fatalf("m3 is held on build 3, which the module went back from (reason %q), by a plan rollback's pin nobody chose", "build 3 leaks")
		}
	})
}

// TestGoneBack_ForwardToABuildInBetweenStillCoversTheRest: gone back from
// 3 to 1 with m3 offline on 3; build 2 made current (forward, no reason)
// ended the going back whole, and m3 stayed on 3. The going back is kept
// until the current build is past every build it went back from.
func TestGoneBack_ForwardToABuildInBetweenStillCoversTheRest(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		goneBackFrom3WithM3Behind(t, s)
		if _, err := s.SetCurrent(ctx, "user:ivan", "mod", 2, ""); err != nil {
			t.Fatal(err)
		}
		m3, _ := s.Machine(ctx, "m3")
		if b := composedBuild(t, s, m3); b == 3 {
			t.Fatalf("m3 still given build 3 (gone back from) after build 2 made current")
		}
	})
}

// TestGoneBack_CoversOnlyBuildsFinishedThen: a build queued (not built)
// when the module went back is not one it went back from: m1, whose host
// applies it as its plan is cancelled, keeps it.
func TestGoneBack_CoversOnlyBuildsFinishedThen(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		madeCurrent(t, s, 2, "")
		if err := s.DB().Exec("UPDATE builds SET state = ? WHERE number = 3", models.BuildQueued).Error; err != nil {
			t.Fatal(err)
		}
		madeCurrent(t, s, 1, "build 2 leaks")
		if mod, _ := s.Module(ctx, "mod"); mod.CurrentBackFrom != 2 {
			t.Fatalf("gone back from 2 while 3 was queued: current_back_from %d", mod.CurrentBackFrom)
		}
		if err := s.DB().Exec("UPDATE builds SET state = ? WHERE number = 3", models.BuildReady).Error; err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "user:ivan", "mod", 3, 0, "")
		if err != nil || v.State != models.PlanRunning {
			t.Fatalf("plan of 3: %v %+v", err, v)
		}
		m1, _ := s.Machine(ctx, "m1")
		held := m1.Generation // the canary's step: its host holds it
		if _, err := s.SetPlanState(ctx, "user:ivan", v.ID, "cancel"); err != nil {
			t.Fatal(err)
		}
		sentReport(t, s, m1.ID, &models.Report{Generation: held, Outcome: "applied", Running: map[string]models.RunningBuild{"mod": {Build: 3}}})
		m1, _ = s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b < 3 {
			t.Fatalf("m1 runs build 3 (not built when the module went back from 2), chosen anew by a plan: moved back to %d", b)
		}
	})
}
