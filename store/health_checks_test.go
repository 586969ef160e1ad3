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

// TestHealth_AnOlderControllersWordIsNotUndone: a controller of a release
// before health_failing shares the store (a rolling upgrade, or run again
// after a rollback) and stores a report: a.svc, failing since t0, passes,
// and b.svc fails — it moves health_check, health_since and health_at,
// and leaves health_failing as it was. The next report, stored here, says
// a.svc has just begun failing again: it took its since from the stale
// health_failing, ten minutes back, and the machine read unhealthy within
// the grace.
func TestHealth_AnOlderControllersWordIsNotUndone(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		t0 := time.Now().UTC().Truncate(time.Millisecond)
		clock := t0
		s.Now = func() time.Time { return clock }
		m := enrolAs(t, s, "m1", "enrol-m1")
		checks := func(a, b bool) []models.CheckResult {
			return []models.CheckResult{{Resource: "a.svc", OK: a, At: clock, Detail: "a down"}, {Resource: "b.svc", OK: b, At: clock, Detail: "b down"}}
		}
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeApplied, Checks: checks(false, true)})

		// What the older controller's report writes.
		clock = t0.Add(10 * time.Minute)
		if err := s.DB().Exec("UPDATE machines SET health = ?, health_check = ?, health_detail = ?, health_since = ?, health_at = ? WHERE id = ?",
			models.HealthFailing, "b.svc", "b down", clock, clock, m.ID).Error; err != nil {
			t.Fatal(err)
		}

		clock = t0.Add(10*time.Minute + 30*time.Second)
		again := clock
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeChecked, Checks: checks(false, true)})
		clock = clock.Add(time.Second)
		got, err := s.Machine(ctx, "m1")
		if err != nil {
			t.Fatal(err)
		}
		if st := s.Rules.State(got, &clock, clock); st != models.StateCurrent || got.HealthCheck != "a.svc" || got.HealthSince == nil || !got.HealthSince.Equal(again) {
			t.Fatalf("a.svc passed at %s and began failing again at %s (grace %s): the machine reads %s, %q failing since %v",
				models.Stamp(t0.Add(10*time.Minute)), models.Stamp(again), s.Rules.UnhealthyAfter, st, got.HealthCheck, got.HealthSince)
		}
	})
}
