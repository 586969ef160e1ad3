package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// planFixture: three machines assigned "mod" (build 1 current), build 2
// and 3 uploaded.
func planFixture(t *testing.T, s *store.Store) []*models.Machine {
	t.Helper()
	var ms []*models.Machine
	for _, n := range []string{"m1", "m2", "m3"} {
		ms = append(ms, fixture(t, s, n))
	}
	for range 2 {
		if err := s.CreateBuild(context.Background(), "test", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return ms
}

// applied reports, for a machine, that it applied its latest generation
// and runs build b of mod.
func applied(t *testing.T, s *store.Store, name string, b int64) {
	t.Helper()
	ctx := context.Background()
	m, _ := s.Machine(ctx, name)
	sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: "applied",
		Running: map[string]models.RunningBuild{"mod": {Build: b}}})
}

// stepPlans steps every plan once, as a worker's look does.
func stepPlans(t *testing.T, s *store.Store) {
	t.Helper()
	if err := s.StepPlans(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// pinTo has a person pin name to build b of mod, with a reason.
func pinTo(t *testing.T, s *store.Store, name string, b int64) {
	t.Helper()
	m, err := s.Machine(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetAssignments(context.Background(), "user:admin", name, &m.Generation, []models.AssignmentView{{Module: "mod", Build: &b, Reason: "hold"}}); err != nil {
		t.Fatal(err)
	}
}

func composedBuild(t *testing.T, s *store.Store, m *models.Machine) int64 {
	t.Helper()
	got, fails, err := s.Compose(context.Background(), []int64{m.ID}, "ctl", newSigner())
	if err != nil || fails[m.ID] != nil {
		t.Fatalf("compose: %v %v", err, fails[m.ID])
	}
	var env models.Envelope
	var p models.DeclarationPayload
	decode(t, got[m.ID].Sealed(), &env)
	decode(t, env.Payload, &p)
	return p.Resources[0].Build
}

func TestPlan_TiersThenCurrent(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.State != models.PlanRunning || len(v.Steps) != 3 {
			t.Fatalf("plan: %+v %v", v, err)
		}
		// Tier 0 (one canary): only m1 is reached, and its declaration names build 2.
		if v.Steps[0].Machine != "m1" || v.Steps[0].State != models.StepSent || v.Steps[1].State != models.StepPending {
			t.Fatalf("steps %+v", v.Steps)
		}
		if b := composedBuild(t, s, ms[0]); b != 2 {
			t.Fatalf("m1 composed with build %d", b)
		}
		if b := composedBuild(t, s, ms[1]); b != 1 {
			t.Fatalf("m2 composed with build %d before its tier", b)
		}
		if m, _ := s.Machine(ctx, "m1"); m.GenerationTrigger != models.TriggerPlan {
			t.Fatalf("trigger %s", m.GenerationTrigger)
		}
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.Tier != 1 || v.Steps[1].State != models.StepSent || v.Steps[2].State != models.StepSent {
			t.Fatalf("after the canary: %+v", v)
		}
		// A tier waits for healthy: m2 applied but its check failed.
		m2, _ := s.Machine(ctx, "m2")
		sentReport(t, s, m2.ID, &models.Report{Generation: m2.Generation, Outcome: "applied",
			Running: map[string]models.RunningBuild{"mod": {Build: 2}},
			Checks:  []models.CheckResult{{Resource: "mod.svc", OK: false}}})
		applied(t, s, "m3", 2)
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning || v.Steps[1].State != models.StepSent {
			t.Fatalf("an unhealthy machine counted as applied: %+v", v.Steps)
		}
		applied(t, s, "m2", 2)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		mod, _ := s.Module(ctx, "mod")
		if v.State != models.PlanDone || *mod.CurrentBuild != 2 {
			t.Fatalf("plan %s, current %d", v.State, *mod.CurrentBuild)
		}
		// A done plan is gone back on by a choice of build, which the
		// refusal gives whole: the build before, and the reason it needs.
		if _, err := s.SetPlanState(ctx, "user:olga", v.ID, "rollback"); !errors.Is(err, models.ErrConflict) ||
			!strings.Contains(err.Error(), "meshctl modules current mod 1 --reason …") {
			t.Fatalf("rollback of a done plan: %v", err)
		}
	})
}

// TestOverlappingPlans_OlderNeverSent reproduces the incident: two merges,
// two plans; the older plan's step runs last. No machine is given the
// older build; the older plan ends superseded and says why.
func TestOverlappingPlans_OlderNeverSent(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		older, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		newer, err := s.CreatePlan(ctx, "test", "mod", 3, 0, "")
		if err != nil || newer.State != models.PlanRunning {
			t.Fatalf("newer plan: %+v %v", newer, err)
		}
		older, _ = s.Plan(ctx, older.ID)
		if older.State != models.PlanSuperseded || !strings.Contains(older.Reason, "superseded by plan") {
			t.Fatalf("older plan: %s %q", older.State, older.Reason)
		}
		// The older plan's step runs last anyway (a worker that held it
		// across the newer plan's start): it cannot lower the target.
		if err := s.DB().Exec("UPDATE plans SET state = 'running' WHERE id = ?", older.ID).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Exec("UPDATE plan_steps SET state = 'pending' WHERE plan_id = ?", older.ID).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.StepPlan(ctx, older.ID); err != nil {
			t.Fatal(err)
		}
		if b := composedBuild(t, s, ms[0]); b != 3 {
			t.Fatalf("m1 composed with build %d after the older plan's late step", b)
		}
		// A plan for an older build than a newer plan's is superseded at once.
		late, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || late.State != models.PlanSuperseded || !strings.Contains(late.Reason, "newer than 2") || len(late.Steps) != 0 {
			t.Fatalf("late plan: %+v %v", late, err)
		}
	})
}

// TestPlan_ControllerDowngradeRefused: a mesh-controller plan below what
// anything runs is refused, saying who runs the newer build: this
// controller, another instance alive in the store, or a control node by
// its reports. A stopped instance does not count.
func TestPlan_ControllerDowngradeRefused(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "mesh-controller", Kind: models.KindController, SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		for range 45 {
			if err := s.CreateBuild(ctx, "test", "mesh-controller", &models.Build{Manifest: `{"resources": []}`}, nil); err != nil {
				t.Fatal(err)
			}
		}
		refused := func(build, own int64, want string) {
			t.Helper()
			v, err := s.CreatePlan(ctx, "test", "mesh-controller", build, own, "")
			if err != nil || v.State != models.PlanRefused || v.Reason != want {
				t.Fatalf("plan of build %d: %s %q %v; want refused %q", build, v.State, v.Reason, err, want)
			}
		}
		refused(41, 42, "refused: would downgrade mesh-controller from build 42 to 41 (this controller runs build 42)")

		// Another instance, alive, runs a newer build than this one.
		if err := s.RegisterInstance(ctx, &models.Instance{ID: "ctl-new", Build: 43, State: models.InstanceServing}); err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterInstance(ctx, &models.Instance{ID: "ctl-gone", Build: 45, State: models.InstanceStopped}); err != nil {
			t.Fatal(err)
		}
		refused(42, 42, "refused: would downgrade mesh-controller from build 43 to 42 (controller instance ctl-new runs build 43)")

		// A control node reports running a newer one still.
		m := fixture(t, s, "cp-1")
		g := m.Generation
		m, err := s.SetAssignments(ctx, "test", "cp-1", &g, []models.AssignmentView{{Module: "mod"}, {Module: "mesh-controller"}})
		if err != nil {
			t.Fatal(err)
		}
		r := &models.Report{Generation: m.Generation, Outcome: models.OutcomeApplied,
			Running: map[string]models.RunningBuild{"mesh-controller": {Build: 44}}}
		sentReport(t, s, m.ID, r)
		refused(43, 42, "refused: would downgrade mesh-controller from build 44 to 43 (control node cp-1 runs build 44)")

		// Not older than anything running: the plan runs.
		v, err := s.CreatePlan(ctx, "test", "mesh-controller", 45, 42, "")
		if err != nil || v.State != models.PlanRunning {
			t.Fatalf("plan of build 45: %+v %v", v, err)
		}
	})
}

// TestPlan_HaltsOnUnhealthyThenRollsBack: a canary whose check fails past
// the grace halts the plan, loudly (it used to stay running, tier 0 sent,
// with an empty why); no second-tier machine is reached; rolling back pins
// the canary to the build it ran before, with the reason on the pin; a
// newer build's plan lifts that pin, on the record.
func TestPlan_HaltsOnUnhealthyThenRollsBack(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		for _, m := range ms {
			applied(t, s, m.Name, 1)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.Steps[0].Machine != "m1" || v.Steps[0].State != models.StepSent {
			t.Fatalf("plan: %+v %v", v, err)
		}
		// Its checks last heard three minutes ago; the one that fails now
		// has failed since two minutes ago, past the grace.
		if err := s.DB().Exec("UPDATE machines SET health = ?, health_at = ? WHERE name = 'm1'", models.HealthPassing, time.Now().Add(-3*time.Minute).UTC()).Error; err != nil {
			t.Fatal(err)
		}
		m1, _ := s.Machine(ctx, "m1")
		failingSince := time.Now().Add(-2 * time.Minute).UTC()
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeApplied,
			Running: map[string]models.RunningBuild{"mod": {Build: 2}},
			Checks:  []models.CheckResult{{Resource: "mod.svc", OK: false, At: failingSince, Detail: "exit status 1: broken"}}})
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanHalted || !strings.Contains(v.Reason, "tier 1 of 2 (canary): m1 check mod.svc unhealthy since") ||
			!strings.Contains(v.Reason, "exit status 1: broken") {
			t.Fatalf("after an unhealthy canary: %s %q", v.State, v.Reason)
		}
		for _, st := range v.Steps[1:] {
			if st.State != models.StepPending {
				t.Fatalf("a second-tier machine was reached: %+v", st)
			}
		}
		if b := composedBuild(t, s, ms[1]); b != 1 {
			t.Fatalf("m2 composed with build %d after the halt", b)
		}

		v, err = s.SetPlanState(ctx, "user:olga", v.ID, "rollback")
		if err != nil || v.State != models.PlanRolledBack {
			t.Fatalf("rollback: %+v %v", v, err)
		}
		as, _, _ := s.Assignments(ctx, "m1")
		if len(as) != 1 || as[0].Build == nil || *as[0].Build != 1 || as[0].Reason != fmt.Sprintf("rollback of plan %d", v.ID) {
			t.Fatalf("m1's pin after the rollback: %+v", as)
		}
		m1, _ = s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 1 {
			t.Fatalf("m1 composed with build %d after the rollback", b)
		}

		// A later healthy build's plan lifts the pin and reaches m1.
		v3, err := s.CreatePlan(ctx, "test", "mod", 3, 0, "")
		if err != nil || v3.State != models.PlanRunning {
			t.Fatalf("plan of build 3: %+v %v", v3, err)
		}
		as, _, _ = s.Assignments(ctx, "m1")
		if as[0].Build != nil || as[0].Reason != "" {
			t.Fatalf("the rollback's pin was not lifted: %+v", as)
		}
		m1, _ = s.Machine(ctx, "m1")
		if b := composedBuild(t, s, m1); b != 3 {
			t.Fatalf("m1 composed with build %d under the newer plan", b)
		}
		evs, _ := s.AuditEvents(ctx, 200, 0)
		lifted := false
		for _, e := range evs {
			lifted = lifted || e.Action == "unpin" && strings.Contains(e.Detail, "lifts the pin to build 1")
		}
		if !lifted {
			t.Fatal("the lifted pin is not on the record")
		}
	})
}

// TestPlan_OnFailureRollback: a service module whose policy is
// on_failure=rollback is rolled back the moment its plan halts.
func TestPlan_OnFailureRollback(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		for _, m := range ms {
			applied(t, s, m.Name, 1)
		}
		if err := s.DB().Model(&models.Module{}).Where("name = ?", "mod").Update("on_failure", models.OnFailureRollback).Error; err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		m1, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeRefused, Reason: "escape: /x"})
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanRolledBack || !strings.Contains(v.Reason, "m1 refused") || !strings.Contains(v.Reason, "rolled back by policy:on_failure=rollback") {
			t.Fatalf("after a refusal under on_failure=rollback: %s %q", v.State, v.Reason)
		}
		as, _, _ := s.Assignments(ctx, "m1")
		if as[0].Build == nil || *as[0].Build != 1 {
			t.Fatalf("m1 not pinned back: %+v", as)
		}
		// Its generation was the plan's act, not a person's edit.
		if m1, _ = s.Machine(ctx, "m1"); m1.GenerationTrigger != models.TriggerPlan {
			t.Fatalf("the rollback's generation has trigger %q, want plan", m1.GenerationTrigger)
		}
	})
}

// TestPlan_APersonsPinIsNoStep: m2 is pinned by a person to build 1 of the
// module ("hold for the db migration"). A plan of build 2 cannot move it, so
// it is no step of the plan: waiting for it halted the plan "did not report
// generation N" though m2 had applied everything it was sent. The others
// are reached and the plan completes.
func TestPlan_APersonsPinIsNoStep(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		m2, _ := s.Machine(ctx, "m2")
		one := int64(1)
		if _, err := s.SetAssignments(ctx, "user:admin", "m2", &m2.Generation, []models.AssignmentView{{Module: "mod", Build: &one, Reason: "hold for the db migration"}}); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range v.Steps {
			if st.Machine == "m2" {
				t.Fatalf("m2, pinned to build 1 by a person, is a step of the plan of build 2: %+v", v.Steps)
			}
		}
		for range 3 {
			for _, n := range []string{"m1", "m3"} {
				applied(t, s, n, 2)
			}
			stepPlans(t, s)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanDone {
			t.Fatalf("plan %s %q", v.State, v.Reason)
		}
		// Said of the plan: done, while m2 runs build 1 (nothing said so).
		if len(v.PinnedAside) != 1 || v.PinnedAside[0] != (models.PinnedAside{Machine: "m2", Build: 1, Reason: "hold for the db migration"}) {
			t.Fatalf("pinned aside: %+v", v.PinnedAside)
		}
	})
}

// TestPlan_APinMadeDuringThePlanWithdrawsItsStep: a person pins m2 to build
// 1 while the plan of build 2 is under way (its tier reached). The plan
// cannot move it: m2's step is withdrawn, with why, and the plan completes
// with the others — where it waited for m2 and halted "did not report".
func TestPlan_APinMadeDuringThePlanWithdrawsItsStep(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		pinTo(t, s, "m2", 1)
		applied(t, s, "m2", 1)
		applied(t, s, "m3", 2)
		stepPlans(t, s)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		var step models.PlanStep
		for _, st := range v.Steps {
			if st.Machine == "m2" {
				step = st
			}
		}
		if v.State != models.PlanDone || step.State != models.StepWithdrawn || !strings.Contains(step.Reason, "pinned to build 1 by a person") {
			t.Fatalf("plan %s %q; m2's step %+v", v.State, v.Reason, step)
		}
	})
}

// TestPlan_AModuleTakenAwayWithdrawsItsStep: m2's module is taken away
// while the plan of build 2 is under way (its tier reached). m2's host
// applies its new generation without the module, so it never runs build
// 2: its step is withdrawn, with why, and the plan completes with the
// others — where it waited for m2 and halted "did not report" blaming a
// host that had reported.
func TestPlan_AModuleTakenAwayWithdrawsItsStep(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		m2, _ := s.Machine(ctx, "m2")
		if _, err := s.SetAssignments(ctx, "user:admin", "m2", &m2.Generation, []models.AssignmentView{}); err != nil {
			t.Fatal(err)
		}
		m2, _ = s.Machine(ctx, "m2")
		sentReport(t, s, m2.ID, &models.Report{Generation: m2.Generation, Outcome: "applied"})
		applied(t, s, "m3", 2)
		s.Now = func() time.Time { return time.Now().Add(time.Hour) } // past every tier's deadline
		stepPlans(t, s)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		var step models.PlanStep
		for _, st := range v.Steps {
			if st.Machine == "m2" {
				step = st
			}
		}
		if v.State != models.PlanDone || step.State != models.StepWithdrawn || !strings.Contains(step.Reason, "no longer has module mod") {
			t.Fatalf("plan %s %q; m2's step %+v", v.State, v.Reason, step)
		}
	})
}

// TestPlan_ACanaryTierNoneTriedPauses: the canary m1 is pinned while the
// plan of build 2 is under way, so its step is withdrawn and no machine of
// the canary tier takes the build. The plan went on to every other machine
// with its gate never passed; it pauses instead, saying why, and a
// person's resume takes it on to the next tier.
func TestPlan_ACanaryTierNoneTriedPauses(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		pinTo(t, s, "m1", 1)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanPaused || v.Tier != 0 || v.Steps[1].State != models.StepPending ||
			!strings.Contains(v.Reason, "tier 1 of 2 (canary) took build 2 on none of its machines: resume to go on to tier 2 of 2 untried, or cancel (m1: pinned to build 1") {
			t.Fatalf("plan %s tier %d %q; steps %+v", v.State, v.Tier, v.Reason, v.Steps)
		}
		v, err = s.SetPlanState(ctx, "user:admin", v.ID, models.PlanResume)
		if err != nil {
			t.Fatal(err)
		}
		if v.State != models.PlanRunning || v.Tier != 1 || v.Steps[1].State != models.StepSent || v.Steps[2].State != models.StepSent || v.Reason != "" {
			t.Fatalf("resumed: %s tier %d %q; steps %+v", v.State, v.Tier, v.Reason, v.Steps)
		}
		// A running plan is not rolled back; the refusal says how to stop it.
		if _, err := s.SetPlanState(ctx, "user:admin", v.ID, models.PlanRollback); !errors.Is(err, models.ErrConflict) ||
			!strings.Contains(err.Error(), "only a halted plan is rolled back; cancel it") {
			t.Fatalf("rolling back a running plan: %v", err)
		}
		applied(t, s, "m2", 2)
		applied(t, s, "m3", 2)
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanDone {
			t.Fatalf("after the last tier: %s %q", v.State, v.Reason)
		}
	})
}

// TestPlan_ARepeatedResumeAnswersOnlyThePauseItSaw: every machine is
// pinned away, so the canary tier pauses untried, and the resume's next
// tier pauses at once too. A second resume of what its sender saw (a
// double click, a retry) is refused rather than passing a pause its
// sender never read; one that names the tier the plan is at goes on.
func TestPlan_ARepeatedResumeAnswersOnlyThePauseItSaw(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"m1", "m2", "m3"} {
			pinTo(t, s, m, 1)
		}
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanPaused || v.Tier != 0 {
			t.Fatalf("plan %s tier %d %q", v.State, v.Tier, v.Reason)
		}
		seen := int64(0)
		if v, err = s.ActOnPlan(ctx, "user:admin", v.ID, models.PlanResume, models.PlanSeen{Tier: &seen}); err != nil {
			t.Fatal(err)
		}
		if v.State != models.PlanPaused || v.Tier != 1 || !strings.HasPrefix(v.Reason, models.UntriedTierPause) {
			t.Fatalf("after the first resume: %s tier %d %q", v.State, v.Tier, v.Reason)
		}
		_, err = s.ActOnPlan(ctx, "user:admin", v.ID, models.PlanResume, models.PlanSeen{Tier: &seen})
		if !errors.Is(err, models.ErrConflict) ||
			!strings.Contains(err.Error(), "has moved on since it was read (at tier 1 of 2 (canary)): it is now paused at tier 2 of 2") {
			t.Fatalf("the repeated resume: %v", err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanPaused || v.Tier != 1 {
			t.Fatalf("after the refused resume: %s tier %d %q", v.State, v.Tier, v.Reason)
		}
		// Acting on what it is now goes on, on the record.
		seen = 1
		if v, err = s.ActOnPlan(ctx, "user:admin", v.ID, models.PlanCancel, models.PlanSeen{Tier: &seen}); err != nil || v.State != models.PlanCancelled {
			t.Fatalf("cancel at the tier it is at: %v %+v", err, v)
		}
		// A tier the plan never had is no move: it is a mistake, said so.
		seen = 5
		if _, err := s.ActOnPlan(ctx, "user:admin", v.ID, models.PlanResume, models.PlanSeen{Tier: &seen}); !errors.Is(err, models.ErrInvalid) ||
			!strings.Contains(err.Error(), "plan 1 has no tier 6: its tiers are 1 to 2") {
			t.Fatalf("a tier the plan does not have: %v", err)
		}
	})
}

// TestPlan_AnActAnswersOnlyTheMoveItSaw: the tier alone does not tell one
// pause or halt from the next at the same tier — a person paused, resumed
// and another paused again; a halted tier resumed halts again, judged the
// same. An act naming the plan's moves as its sender read them is refused
// once the plan has moved since, and a person's pause says who paused it.
func TestPlan_AnActAnswersOnlyTheMoveItSaw(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		act := func(who, action string, moves int64) (*models.PlanView, error) {
			return s.ActOnPlan(ctx, who, v.ID, action, models.PlanSeen{Moves: &moves})
		}
		v, _ = s.Plan(ctx, v.ID)
		if v, err = act("user:admin", models.PlanPause, v.Moves); err != nil || v.Reason != "paused by user:admin" {
			t.Fatalf("pause: %v %+v", err, v)
		}
		paused := v.Moves
		if v, err = act("user:admin", models.PlanResume, paused); err != nil || v.State != models.PlanRunning || v.Reason != "" {
			t.Fatalf("resume: %v %+v", err, v)
		}
		if v, err = act("user:carol", models.PlanPause, v.Moves); err != nil || v.Reason != "paused by user:carol" {
			t.Fatalf("carol's pause: %v %+v", err, v)
		}
		// The admin's resume again (a retry), of the pause it saw.
		if _, err = act("user:admin", models.PlanResume, paused); !errors.Is(err, models.ErrConflict) ||
			!strings.Contains(err.Error(), "plan 1 has changed since it was read: it is now paused at tier 1 of 2 (canary) (paused by user:carol)") {
			t.Fatalf("a resume of a pause since answered: %v", err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanPaused || v.Reason != "paused by user:carol" {
			t.Fatalf("after the refused resume: %s %q", v.State, v.Reason)
		}
		if v, err = act("user:carol", models.PlanResume, v.Moves); err != nil {
			t.Fatal(err)
		}

		// The canary fails: halted. Resumed, its tier is judged again and
		// halts again; a second resume of the first halt is refused.
		m1, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeFailed, Reason: "exec format error"})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("after the canary failed: %s %q", v.State, v.Reason)
		}
		halted := v.Moves
		if v, err = act("user:admin", models.PlanResume, halted); err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted || v.Tier != 0 {
			t.Fatalf("the resumed tier judged again: %s tier %d %q", v.State, v.Tier, v.Reason)
		}
		if _, err = act("user:admin", models.PlanResume, halted); !errors.Is(err, models.ErrConflict) {
			t.Fatalf("a second resume of the first halt: %v", err)
		}
		// A refused act says what the plan may be instead.
		if _, err := s.SetPlanState(ctx, "user:admin", v.ID, models.PlanPause); !errors.Is(err, models.ErrConflict) ||
			!strings.Contains(err.Error(), "is halted; cannot pause it (a halted plan may be: resume, cancel, rollback)") {
			t.Fatalf("pausing a halted plan: %v", err)
		}
		// Cancelled, the failed step keeps why it failed after the cancel's
		// words (they replaced it).
		if v, err = s.SetPlanState(ctx, "user:admin", v.ID, models.PlanCancel); err != nil {
			t.Fatal(err)
		}
		for _, st := range v.Steps {
			if st.Machine == "m1" && (st.State != models.StepWithdrawn || !strings.Contains(st.Reason, "the plan was cancelled before its host applied the build") ||
				!strings.Contains(st.Reason, "; before: ") || !strings.Contains(st.Reason, "exec format error")) {
				t.Fatalf("m1's step after the cancel: %+v", st)
			}
		}
	})
}

// TestPlan_ARevokedMachineIsNotWaitedFor: m2 is revoked. Nothing is sent
// to a revoked machine, so its step waited "sent, awaiting its host's
// report" until the tier's deadline halted the plan blaming its host. It
// is withdrawn, saying so, and the plan goes on with the others.
func TestPlan_ARevokedMachineIsNotWaitedFor(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevokeMachine(ctx, "user:admin", "m2", "disk sold"); err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		applied(t, s, "m3", 2)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanDone {
			t.Fatalf("plan %s tier %d %q; steps %+v", v.State, v.Tier, v.Reason, v.Steps)
		}
		for _, st := range v.Steps {
			if st.Machine == "m2" && (st.State != models.StepWithdrawn || st.Reason != "revoked (disk sold): nothing is sent to it, so the plan does not reach it") {
				t.Fatalf("m2's step: %+v", st)
			}
		}
	})
}

// TestPlan_ACanaryPinnedToThePlansBuildPasses: the canary is pinned to the
// plan's own build: its step is withdrawn (the plan does not move it), but
// it runs the build, so the tier is no untried one and the plan goes on.
func TestPlan_ACanaryPinnedToThePlansBuildPasses(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		pinTo(t, s, "m1", 2)
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning || v.Tier != 1 {
			t.Fatalf("plan %s tier %d %q; steps %+v", v.State, v.Tier, v.Reason, v.Steps)
		}
	})
}

// TestPlan_APinIsNoProof: the canary is pinned to the plan's build but its
// host failed to apply it and runs the build before: its tier is untried,
// and the plan pauses rather than send the build on to the next tier.
func TestPlan_APinIsNoProof(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		pinTo(t, s, "m1", 2)
		m1, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeFailed, Reason: "exec format error"})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanPaused || v.Tier != 0 || v.Steps[1].State != models.StepPending {
			t.Fatalf("plan %s tier %d %q; steps %+v", v.State, v.Tier, v.Reason, v.Steps)
		}
	})
}

// TestPlan_NoMachineTookItWaitsBeforeCurrent: every machine of the plan is
// pinned, so none takes the build: past the canary tier it pauses, and
// past the last it pauses again before the build becomes current — it
// went to done and made current a build no machine ever ran.
func TestPlan_NoMachineTookItWaitsBeforeCurrent(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"m1", "m2", "m3"} {
			pinTo(t, s, n, 1)
		}
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanPaused || !strings.Contains(v.Reason, "resume to go on to tier 2 of 2 untried") {
			t.Fatalf("after the canary tier: %s %q", v.State, v.Reason)
		}
		if v, err = s.SetPlanState(ctx, "user:admin", v.ID, models.PlanResume); err != nil {
			t.Fatal(err)
		}
		if v.State != models.PlanPaused || !strings.Contains(v.Reason, "resume to make build 2 current untried (no machine of the plan took it)") {
			t.Fatalf("after the last tier: %s %q", v.State, v.Reason)
		}
		if mod, _ := s.Module(ctx, "mod"); mod.CurrentBuild == nil || *mod.CurrentBuild != 1 {
			t.Fatalf("current build %v before a person's resume", mod.CurrentBuild)
		}
		if v, err = s.SetPlanState(ctx, "user:admin", v.ID, models.PlanResume); err != nil || v.State != models.PlanDone {
			t.Fatalf("resumed past the last tier: %v %v", v, err)
		}
	})
}

// TestPlan_ComposeErrorJudgedByItsGeneration: a step whose machine's
// generation cannot be composed fails at once, saying why; an error
// recorded for a generation that was composed since (what its host
// decodes changed) fails nothing.
func TestPlan_ComposeErrorJudgedByItsGeneration(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		m1, _ := s.Machine(ctx, "m1")
		composedBuild(t, s, ms[0]) // its generation has a declaration
		if err := s.DB().Exec("UPDATE machines SET compose_error = ?, compose_error_generation = ? WHERE id = ?", "variables: ${var.port}", m1.Generation, m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning || v.Steps[0].State != models.StepSent {
			t.Fatalf("a stale compose error: plan %s %q; steps %+v", v.State, v.Reason, v.Steps)
		}
		if err := s.DB().Exec("DELETE FROM sends WHERE machine_id = ?", m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Exec("DELETE FROM declarations WHERE machine_id = ?", m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanHalted || v.Steps[0].State != models.StepFailed || !strings.Contains(v.Steps[0].Reason, "cannot be composed: variables: ${var.port}") {
			t.Fatalf("a compose error of its generation: plan %s %q; steps %+v", v.State, v.Reason, v.Steps)
		}
	})
}

// TestPlan_APinnedCanaryThatRanItCountsAtTheEnd: the canary, pinned to the
// build, runs it; the last tier's machines are all pinned elsewhere. The
// plan finishes: a machine of it took the build (it paused "no machine of
// the plan took it", untrue).
func TestPlan_APinnedCanaryThatRanItCountsAtTheEnd(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		pinTo(t, s, "m1", 2)
		applied(t, s, "m1", 2)
		pinTo(t, s, "m2", 1)
		pinTo(t, s, "m3", 1)
		stepPlans(t, s)
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanDone {
			t.Fatalf("plan %s %q; steps %+v", v.State, v.Reason, v.Steps)
		}
	})
}

// TestPlan_ALaterGenerationsComposeError: m1's step was sent (composed) at
// its generation; a later change makes its next generation uncomposable.
// The step waits for its host (which may apply what it was sent), where it
// halted the plan over another module's variable. Had nothing been
// composed since the step's generation, it fails at once.
func TestPlan_ALaterGenerationsComposeError(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		composedBuild(t, s, ms[0]) // the step's generation, composed: it can be sent
		m1, _ := s.Machine(ctx, "m1")
		if _, err := s.SetVariables(ctx, "user:admin", "m1", &m1.Generation, map[string]string{"other": "x"}); err != nil {
			t.Fatal(err)
		}
		m1, _ = s.Machine(ctx, "m1")
		if err := s.DB().Exec("UPDATE machines SET compose_error = ?, compose_error_generation = ? WHERE id = ?", "variables: ${var.other2}", m1.Generation, m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning || v.Steps[0].State != models.StepSent {
			t.Fatalf("its generation sent, a later one uncomposable: plan %s %q; steps %+v", v.State, v.Reason, v.Steps)
		}
		if err := s.DB().Exec("DELETE FROM sends WHERE machine_id = ?", m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Exec("DELETE FROM declarations WHERE machine_id = ?", m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted || !strings.Contains(v.Steps[0].Reason, "cannot be composed: variables: ${var.other2}") {
			t.Fatalf("nothing composed since its generation: plan %s %q; steps %+v", v.State, v.Reason, v.Steps)
		}
	})
}

// TestPlan_APausedPlanRecordsWhatItsMachinesDid: a person pauses a plan
// to look at its canary; the canary's report that it applied the build is
// recorded on the plan at once (its step said "sent, awaiting its host's
// report" until the resume), while the plan still reaches no further
// machine and stays at its tier. Resumed, it goes on from there.
func TestPlan_APausedPlanRecordsWhatItsMachinesDid(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetPlanState(ctx, "user:olga", v.ID, "pause"); err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanPaused || v.Tier != 0 || v.Steps[0].State != models.StepApplied || v.Steps[1].State != models.StepPending {
			t.Fatalf("paused, after the canary applied: %s at tier %d, steps %+v", v.State, v.Tier, v.Steps)
		}
		if _, err := s.SetPlanState(ctx, "user:olga", v.ID, "resume"); err != nil {
			t.Fatal(err)
		}
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.Tier != 1 || v.Steps[1].State != models.StepSent {
			t.Fatalf("resumed: %s at tier %d, steps %+v", v.State, v.Tier, v.Steps)
		}
	})
}

// TestPlan_ADeletedMachineStaysOnTheRecord: a machine deleted after a plan
// and a host rollout reached it stays in both, under its name, said
// deleted: the plan's page lost its step (and a tier) when it was. The
// rollout, still running, withdraws it rather than wait on it, and the
// plan, halted, rolls back the machines still there.
func TestPlan_ADeletedMachineStaysOnTheRecord(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		applied(t, s, "m1", 2)
		stepPlans(t, s) // the canary applied: tier 2 (m2, m3) reached
		if err := s.DeleteMachine(ctx, "user:admin", "m1"); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Plan(ctx, v.ID)
		names := []string{}
		for _, st := range v.Steps {
			names = append(names, st.Machine+" "+st.State)
		}
		if len(v.Steps) != 3 || v.Tiers() != 2 || !slices.Contains(names, "m1 (deleted) applied") {
			t.Fatalf("plan after m1 was deleted: %d tiers, steps %v", v.Tiers(), names)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		names = names[:0]
		for _, m := range ro.Machines {
			names = append(names, m.Machine+" "+m.State+" "+m.Reason)
		}
		if len(ro.Machines) != 3 || !slices.Contains(names, "m1 (deleted) withdrawn deleted: the machine is gone") {
			t.Fatalf("rollout after m1 was deleted: %v", names)
		}
		m2, _ := s.Machine(ctx, "m2")
		sentReport(t, s, m2.ID, &models.Report{Generation: m2.Generation, Outcome: models.OutcomeFailed, Reason: "exec format error"})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("plan %s: %s", v.State, v.Reason)
		}
		back, err := s.SetPlanState(ctx, "user:olga", v.ID, "rollback")
		if err != nil || back.State != models.PlanRolledBack || !strings.Contains(back.Reason, "m1 was deleted") {
			t.Fatalf("rollback of a plan whose canary was deleted: %v %+v", err, back)
		}
	})
}

// TestPlan_APausedPlansDeletedMachineHoldsUpNoPlan: a person pauses a
// plan whose canary was sent the build, then deletes the canary. The
// paused plan's judgeStopped reads the machine of each sent step and fails
// on the missing row: StepPlans errors on every look, and every plan
// after it (by id) is never stepped again.
func TestPlan_APausedPlansDeletedMachineHoldsUpNoPlan(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if v.Steps[0].State != models.StepSent {
			t.Fatalf("canary step %s", v.Steps[0].State)
		}
		if _, err := s.SetPlanState(ctx, "user:olga", v.ID, "pause"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMachine(ctx, "user:admin", v.Steps[0].Machine); err != nil {
			t.Fatal(err)
		}
		if err := s.StepPlans(ctx); err != nil {
			t.Fatalf("stepping plans after a paused plan's sent machine was deleted: %v", err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.Steps[0].State != models.StepWithdrawn || v.Steps[0].Reason != "deleted: the machine is gone" {
			t.Fatalf("the deleted canary's step: %+v", v.Steps[0])
		}
		// And resuming it works.
		if _, err := s.SetPlanState(ctx, "user:olga", v.ID, "resume"); err != nil {
			t.Fatalf("resume: %v", err)
		}
	})
}

// TestPlan_AStepNeverSentSaysSo: a canary whose host, heard from lately,
// never polled for the step's generation fails at the deadline saying it
// was never sent, not only that it "did not report" (which blamed a host
// that was never given it).
func TestPlan_AStepNeverSentSaysSo(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Hour) // past the tier's deadline
		if err := s.DB().Exec("UPDATE machines SET last_seen = ? WHERE id = ?", later.Add(-5*time.Second), ms[0].ID).Error; err != nil {
			t.Fatal(err)
		}
		s.Now = func() time.Time { return later }
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanHalted || !strings.Contains(v.Reason, "m1 did not report generation") || !strings.Contains(v.Reason, ": it was never sent (its host last polled 5s ago)") {
			t.Fatalf("plan %s: %q", v.State, v.Reason)
		}
	})
}

// TestPlan_AHaltedPlanRecordsWhatItsMachinesDid: a plan halted on one
// machine of a tier while another of that tier was still sent; that one's
// host then applied the build, and its step still read "sent" — "awaiting
// its host's report" — when a person read the steps to choose between
// resuming and rolling back.
func TestPlan_AHaltedPlanRecordsWhatItsMachinesDid(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 2) // the canary
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.Tier != 1 || v.Steps[1].State != models.StepSent || v.Steps[2].State != models.StepSent {
			t.Fatalf("second tier: %s at tier %d, steps %+v", v.State, v.Tier, v.Steps)
		}
		m2, _ := s.Machine(ctx, "m2")
		sentReport(t, s, m2.ID, &models.Report{Generation: m2.Generation, Outcome: models.OutcomeRejected, Reason: "failed 3 attempts; last: exit status 1"})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("after m2 rejected: %s %q", v.State, v.Reason)
		}
		applied(t, s, "m3", 2)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		if v.State != models.PlanHalted || v.Steps[2].Machine != "m3" || v.Steps[2].State != models.StepApplied {
			t.Fatalf("%s, after m3's host applied build 2: m3's step is %q (%q)", v.State, v.Steps[2].State, v.Steps[2].Reason)
		}
	})
}

// TestPlan_ASecondPlanOfTheSameBuildKeepsTheMachinesItReached: the
// upload's own plan of build 2 reached its canary m1, whose host had not
// applied it; a person then made a plan of build 2 by hand. The new plan
// reached m1 at once, then superseded the older plan of its own build,
// whose withdrawal took build 2 back from m1: its declaration named build
// 1 again while the new plan's step waited for it to run build 2.
func TestPlan_ASecondPlanOfTheSameBuildKeepsTheMachinesItReached(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		first, err := s.CreatePlan(ctx, "upload", "mod", 2, 0, "")
		if err != nil || first.State != models.PlanRunning || first.Steps[0].Machine != "m1" || first.Steps[0].State != models.StepSent {
			t.Fatalf("first plan: %+v %v", first, err)
		}
		second, err := s.CreatePlan(ctx, "user:olga", "mod", 2, 0, "")
		if err != nil || second.State != models.PlanRunning || second.Steps[0].Machine != "m1" || second.Steps[0].State != models.StepSent {
			t.Fatalf("second plan: %+v %v", second, err)
		}
		if first, _ = s.Plan(ctx, first.ID); first.State != models.PlanSuperseded {
			t.Fatalf("first plan %s", first.State)
		}
		if b := composedBuild(t, s, ms[0]); b != 2 {
			t.Errorf("m1, reached by plan %d of build 2, is composed build %d; plan %d's supersede said: %q", second.ID, b, first.ID, first.Reason)
		}
		applied(t, s, "m1", composedBuild(t, s, ms[0]))
		stepPlans(t, s)
		if v, _ := s.Plan(ctx, second.ID); v.Tier == 0 && v.Steps[0].State != models.StepApplied {
			t.Errorf("plan %d waits at tier 0 on m1 (step %s, %q)", v.ID, v.Steps[0].State, v.Steps[0].Reason)
		}
	})
}
