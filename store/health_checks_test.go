package store_test

import (
	"context"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestHealth_ASecondCheckFailingPastTheGraceIsUnhealthy: two declared
// checks fail together for minutes, and the first recovers. The host's
// report then says the second still fails, as its reports have said for
// four minutes. The machine kept one check's "failing since": the second
// started again from that report, and the machine read "current … within
// the grace" for another grace. Each failing check now keeps its own.
func TestHealth_ASecondCheckFailingPastTheGraceIsUnhealthy(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clock := time.Now().UTC().Truncate(time.Millisecond) // what both stores keep
		s.Now = func() time.Time { return clock }
		m := enrolAs(t, s, "m1", "enrol-m1")
		checks := func(a, b bool) []models.CheckResult {
			return []models.CheckResult{
				{Resource: "a.svc", OK: a, At: clock, Detail: "a down"},
				{Resource: "b.svc", OK: b, At: clock, Detail: "b down"},
			}
		}
		state := func() (string, *models.Machine) {
			t.Helper()
			got, err := s.Machine(ctx, "m1")
			if err != nil {
				t.Fatal(err)
			}
			return s.Rules.State(got, &clock, clock), got
		}
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeApplied, Checks: checks(false, true)})
		clock = clock.Add(time.Minute)
		bSince := clock
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeChecked, Checks: checks(false, false)})
		clock = clock.Add(4 * time.Minute)
		if st, _ := state(); st != models.StateUnhealthy {
			t.Fatalf("both checks failing for minutes: %s", st)
		}

		// a.svc recovers; b.svc has failed since bSince.
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeChecked, Checks: checks(true, false)})
		clock = clock.Add(time.Second)
		st, got := state()
		if st != models.StateUnhealthy || got.HealthCheck != "b.svc" || got.HealthSince == nil || !got.HealthSince.Equal(bSince) {
			t.Fatalf("b.svc has failed in every report since %s (%s ago, grace %s); the machine reads %s, check %q since %v",
				models.Stamp(bSince), clock.Sub(bSince), s.Rules.UnhealthyAfter, st, got.HealthCheck, got.HealthSince)
		}

		// A check that begins failing now is within its grace, the one
		// failing longest is the one shown; all passing clears both.
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeChecked, Checks: checks(false, false)})
		if _, got = state(); got.HealthCheck != "b.svc" || !got.HealthSince.Equal(bSince) {
			t.Fatalf("a.svc failing again beside b.svc: shown %q since %v, want b.svc since %s", got.HealthCheck, got.HealthSince, models.Stamp(bSince))
		}
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeChecked, Checks: checks(true, true)})
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeChecked, Checks: checks(true, false)})
		clock = clock.Add(time.Second)
		if st, got = state(); st != models.StateCurrent || got.HealthSince == nil || !got.HealthSince.Equal(clock.Add(-time.Second)) {
			t.Fatalf("b.svc failing again after all passed: %s since %v, want current, failing since the last report", st, got.HealthSince)
		}
	})
}
