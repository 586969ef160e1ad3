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

// TestPlan_CrashLoopingCanaryHalts (operator's scenario): build 2's
// service exits at once and its host's supervisor restarts it again and
// again. The canary's host reports the generation applied with that
// service's check failing as its host says a restarted service does
// ("exited: exit status 1; restarted …"), and its last lines marked
// restarted. Live, the canary was judged applied a second after its
// report, the plan reached every other machine, the build became current
// and every machine read "current", "passing". The canary is not applied
// within the grace (the service may still be starting), no later tier is
// reached, and past the grace the plan halts naming the service and why.
func TestPlan_CrashLoopingCanaryHalts(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clock := time.Now()
		s.Now = func() time.Time { return clock }
		_, v := planOfBuild2(t, s)
		m1, _ := s.Machine(ctx, "m1")
		why := "exited: exit status 1; restarted 1 time since " + clock.UTC().Format("15:04:05")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeApplied,
			Running: map[string]models.RunningBuild{"mod": {Build: 2}},
			Checks:  []models.CheckResult{{Resource: "mod.svc", OK: false, At: clock.UTC(), Detail: why}},
			Logs: []models.ServiceLog{{Resource: "mod.svc", Why: models.LogRestarted,
				Lines: []string{"fatal: cannot bind port", "--- mesh-host: mod.svc (pid 812) exited: exit status 1"}}}})
		reached := func(v *models.PlanView) []string {
			var out []string
			for _, st := range v.Steps {
				if st.Tier > 0 && st.State != models.StepPending {
					out = append(out, st.Machine+":"+st.State)
				}
			}
			return out
		}
		for range 2 {
			clock = clock.Add(time.Second)
			stepPlans(t, s)
		}
		v, _ = s.Plan(ctx, v.ID)
		m1, _ = s.Machine(ctx, "m1")
		if r := reached(v); len(r) > 0 || v.Steps[0].State == models.StepApplied {
			t.Fatalf("canary's service crash-looping: canary %s, plan %s tier %d, later tiers reached %v", v.Steps[0].State, v.State, v.Tier, r)
		}
		if m1.Health != models.HealthFailing || m1.HealthCheck != "mod.svc" || m1.HealthDetail != why {
			t.Fatalf("m1's health: %s %s %q", m1.Health, m1.HealthCheck, m1.HealthDetail)
		}

		// Past the grace, the service still failing: the plan halts at
		// its canary, saying which service and why.
		clock = clock.Add(s.Rules.UnhealthyAfter + time.Second)
		stepPlans(t, s)
		v, _ = s.Plan(ctx, v.ID)
		m1, _ = s.Machine(ctx, "m1")
		mod, _ := s.Module(ctx, "mod")
		if st := s.Rules.State(m1, &clock, clock); st != models.StateUnhealthy {
			t.Fatalf("m1 reads %s past the grace", st)
		}
		if r := reached(v); len(r) > 0 || v.State != models.PlanHalted || mod.CurrentBuild != nil && *mod.CurrentBuild == 2 ||
			!strings.Contains(v.Reason, "mod.svc") || !strings.Contains(v.Reason, why) {
			t.Fatalf("past the grace: plan %s %q, later tiers reached %v, current build %v", v.State, v.Reason, r, mod.CurrentBuild)
		}
	})
}
