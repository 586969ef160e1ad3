package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_StepNotFailedByAnOlderGeneration: a machine whose generation g
// failed (its host retrying it) is reached by a plan at g+1; one more
// failed attempt of g, reported after the step started, failed the step
// as "failed to apply generation g+1", never attempted, and halted the
// plan. A step fails only for a failure of its generation or a later one.
func TestPlan_StepNotFailedByAnOlderGeneration(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s)
		for _, n := range []string{"m1", "m2", "m3"} {
			applied(t, s, n, 1)
		}
		// m1's next generation (a variable change) fails to apply.
		m1, _ := s.Machine(ctx, "m1")
		g := m1.Generation
		m1, err := s.SetVariables(ctx, "test", "m1", &g, map[string]string{"port": "9001"})
		if err != nil {
			t.Fatal(err)
		}
		failing := m1.Generation
		sentReport(t, s, m1.ID, &models.Report{Generation: failing, Outcome: models.OutcomeFailed, Attempt: 1, Reason: "port 9001 in use"})
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.Steps[0].Machine != "m1" {
			t.Fatalf("plan: %+v %v", v, err)
		}
		stepGen := v.Steps[0].Generation
		time.Sleep(10 * time.Millisecond)
		// The host's next attempt of the failing generation, before it polls for the plan's.
		sentReport(t, s, m1.ID, &models.Report{Generation: failing, Outcome: models.OutcomeFailed, Attempt: 2, Reason: "port 9001 in use"})
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Plan(ctx, v.ID)
		t.Logf("generation %d failing, the step's is %d: plan %s %q; step %s %q", failing, stepGen, v.State, v.Reason, v.Steps[0].State, v.Steps[0].Reason)
		if v.State == models.PlanHalted && strings.Contains(v.Steps[0].Reason, "failed to apply generation") {
			t.Fatalf("the plan halted on generation %d's failure, blamed on generation %d, which no host has attempted", failing, stepGen)
		}
	})
}

// TestPlan_TierNotDoneWhileItsMachineIsUnhealthy: a machine of a tier
// applied the plan's build healthy, then turned unhealthy (its checked
// report, past the grace) while the tier waited for another machine. The
// plan halts, rather than finish and make the build current.
func TestPlan_TierNotDoneWhileItsMachineIsUnhealthy(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, v := planOfBuild2(t, s)
		ok := []models.CheckResult{{Resource: "mod.svc", OK: true, Detail: "tcp"}}
		healthy := func(name string) string {
			m, _ := s.Machine(ctx, name)
			id := ""
			r := &models.Report{Generation: m.Generation, Outcome: models.OutcomeApplied,
				Running: map[string]models.RunningBuild{"mod": {Build: 2}}, Checks: ok}
			sentReport(t, s, m.ID, r)
			id = r.Send
			if err := s.StepPlans(ctx); err != nil {
				t.Fatal(err)
			}
			return id
		}
		healthy("m1") // the canary
		send2 := healthy("m2")
		// m2's service then fails its check, for longer than the grace.
		m2, _ := s.Machine(ctx, "m2")
		if _, err := s.InsertReport(ctx, m2.ID, &models.Report{Send: send2, Generation: m2.AppliedGeneration, Outcome: models.OutcomeChecked,
			Checks: []models.CheckResult{{Resource: "mod.svc", OK: false, At: time.Now().Add(-5 * time.Minute).UTC(), Detail: "connection refused"}}}, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		m2, _ = s.Machine(ctx, "m2")
		now := time.Now()
		t.Logf("before m3 applies: m2 is %s: %s", s.Rules.State(m2, &now, now), m2.HealthDetail)
		healthy("m3")
		v, _ = s.Plan(ctx, v.ID)
		m2, _ = s.Machine(ctx, "m2")
		mod, _ := s.Module(ctx, "mod")
		t.Logf("plan %s (%q), build %d current; m2 is %s: %s", v.State, v.Reason, *mod.CurrentBuild, s.Rules.State(m2, &now, now), m2.HealthDetail)
		if v.State == models.PlanDone && s.Rules.Unhealthy(m2, now) {
			t.Fatalf("plan done, build %d current, while m2 of its last tier is unhealthy on it", *mod.CurrentBuild)
		}
	})
}

// TestPlan_CancelWithdrawsWhatNoHostApplied: a plan cancelled while its
// canary's host was away left the build as that machine's target, so the
// host, back later, applied a build its plan was cancelled for, and kept
// it (never an older build). Cancelling takes the build back from the
// machines whose hosts have not applied it; one that did keeps it.
func TestPlan_CancelWithdrawsWhatNoHostApplied(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms := planFixture(t, s)
		for _, n := range []string{"m1", "m2", "m3"} {
			applied(t, s, n, 1)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.Steps[0].State != models.StepSent {
			t.Fatalf("plan: %+v %v", v, err)
		}
		canary := v.Steps[0].Machine
		var m *models.Machine
		for _, x := range ms {
			if x.Name == canary {
				m = x
			}
		}
		if b := composedBuild(t, s, m); b != 2 {
			t.Fatalf("the canary is sent build %d, want the plan's 2", b)
		}
		v, err = s.SetPlanState(ctx, "test", v.ID, "cancel")
		if err != nil || v.State != models.PlanCancelled {
			t.Fatalf("cancel: %+v %v", v, err)
		}
		if v.Steps[0].State != models.StepWithdrawn || !strings.Contains(v.Reason, "target removed from 1 machine") {
			t.Fatalf("cancelled: step %s %q, plan %q", v.Steps[0].State, v.Steps[0].Reason, v.Reason)
		}
		if b := composedBuild(t, s, m); b != 1 {
			t.Fatalf("after the cancel the canary's host, back, would be sent build %d, want 1 (what it runs)", b)
		}
	})
}

// TestWrites_SameValuesNoGeneration: writing a machine's variables or
// labels as they are made a new generation — a send and a full apply on
// its host — and an audit row, for nothing (assign already skipped its
// no-ops). Push is the way to send the same content again.
func TestWrites_SameValuesNoGeneration(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		g := m.Generation
		m, err := s.SetVariables(ctx, "test", "m1", &g, map[string]string{"port": "8081"})
		if err != nil {
			t.Fatal(err)
		}
		g = m.Generation
		if m, err = s.SetVariables(ctx, "test", "m1", &g, map[string]string{"port": "8081"}); err != nil || m.Generation != g {
			t.Fatalf("the same variables again: generation %d (was %d) %v", m.Generation, g, err)
		}
		lc, err := s.SetLabels(ctx, "test", "m1", &g, map[string]string{"zone": "a"}, false)
		if err != nil {
			t.Fatal(err)
		}
		g = lc.Machine.Generation
		if lc, err = s.SetLabels(ctx, "test", "m1", &g, map[string]string{"zone": "a"}, false); err != nil || lc.Machine.Generation != g {
			t.Fatalf("the same labels again: generation %d (was %d) %v", lc.Machine.Generation, g, err)
		}
		if m, err = s.SetVariables(ctx, "test", "m1", &g, map[string]string{"port": "8082"}); err != nil || m.Generation != g+1 {
			t.Fatalf("a changed variable: generation %d, want %d (%v)", m.Generation, g+1, err)
		}
	})
}

// step's machine never applied the build, but keeps it as its target.
func TestPlan_CancelHaltedWithdrawsWhatNoHostApplied(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms, v := planOfBuild2(t, s)
		m1, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeFailed, Attempt: 1, Reason: "disk full"})
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Plan(ctx, v.ID)
		t.Logf("before cancel: plan %s, step %s %q", v.State, v.Steps[0].State, v.Steps[0].Reason)
		v, err := s.SetPlanState(ctx, "test", v.ID, "cancel")
		if err != nil {
			t.Fatal(err)
		}
		b := composedBuild(t, s, ms[0])
		t.Logf("after cancel: plan %s %q, step %s; m1 (never applied build 2) is composed build %d", v.State, v.Reason, v.Steps[0].State, b)
		if b != 1 {
			t.Fatalf("the cancelled plan's build %d is still m1's target (its host retrying will apply it)", b)
		}
	})
}

// is still composed the yanked build.
func TestPlan_YankWithdrawsWhatNoHostApplied(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ms, v := planOfBuild2(t, s)
		if _, err := s.YankBuild(ctx, "test", "mod", 2, "corrupts data"); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Plan(ctx, v.ID)
		b := composedBuild(t, s, ms[0])
		t.Logf("plan %s %q; step %s; m1 composed build %d", v.State, v.Reason, v.Steps[0].State, b)
		if b == 2 {
			t.Fatalf("m1, whose host never applied build 2, is still sent the yanked build 2")
		}
	})
}

// planOfBuild2 is a plan of build 2 of mod, made once m1, m2 and m3 have
// applied build 1 (planFixture).
func planOfBuild2(t *testing.T, s *store.Store) ([]*models.Machine, *models.PlanView) {
	t.Helper()
	ms := planFixture(t, s)
	for _, n := range []string{"m1", "m2", "m3"} {
		applied(t, s, n, 1)
	}
	v, err := s.CreatePlan(context.Background(), "test", "mod", 2, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	return ms, v
}
