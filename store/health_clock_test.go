package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestHealth_AHostClockBehindDoesNotSkipTheGrace: a machine applied its
// generation an hour ago, every check passing, and its host said nothing
// of its health since (a host reports a look only when it changes). Its
// clock runs five minutes behind the controller's. A check fails now: the
// report dated the look by the host's clock, five minutes "ago" — after
// the controller's last word of the machine's health, so it was taken as
// when the check began failing. The machine read unhealthy at once,
// "since" a time it was passing, with no grace (and a plan's step judged
// on it failed at once). The report now says the host's clock as it
// leaves, and its times are read against it.
func TestHealth_AHostClockBehindDoesNotSkipTheGrace(t *testing.T) {
	for i, skew := range []time.Duration{-5 * time.Minute, 5 * time.Minute} {
		name := fmt.Sprintf("m%d", i)
		t.Run(fmt.Sprint("host clock ", skew), func(t *testing.T) {
			storetest.Dialects(t, func(t *testing.T, s *store.Store) {
				ctx := context.Background()
				clock := time.Now().UTC().Truncate(time.Millisecond)
				s.Now = func() time.Time { return clock }
				host := func() time.Time { return clock.Add(skew) } // the host's clock
				m := enrolAs(t, s, name, "enrol-"+name)
				look := func(ok bool, at time.Time) []models.CheckResult {
					return []models.CheckResult{{Resource: "web.svc", OK: ok, At: at, Detail: "connection refused"}}
				}
				at := host()
				sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeApplied, FinishedAt: &at, Checks: look(true, at), HostNow: &at})

				clock = clock.Add(time.Hour) // passing all along: nothing reported
				failed, lookAt := clock, host()
				clock = clock.Add(time.Second) // the report leaves a second later
				left := host()
				sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeChecked, FinishedAt: &left, Checks: look(false, lookAt), HostNow: &left})

				got, err := s.Machine(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				st := s.Rules.State(got, &clock, clock)
				if st != models.StateCurrent || got.HealthSince == nil || got.HealthSince.Before(failed.Add(-time.Millisecond)) || got.HealthSince.After(clock) {
					t.Fatalf("web.svc began failing at %s (the host's clock %s off); a second later the machine reads %s, failing since %v (grace %s): %+v",
						models.Stamp(failed), skew, st, got.HealthSince, s.Rules.UnhealthyAfter, models.SayState(st, got, &clock, nil, clock))
				}

				// Failing past the grace, as the controller's clock counts it.
				clock = failed.Add(s.Rules.UnhealthyAfter + time.Second)
				if st := s.Rules.State(got, &clock, clock); st != models.StateUnhealthy {
					t.Fatalf("failing %s (grace %s): reads %s", clock.Sub(failed), s.Rules.UnhealthyAfter, st)
				}
			})
		})
	}
}
