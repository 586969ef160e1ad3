package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestMachine_LauncherAsItsLastReportSaid: a host's reports say which
// launcher runs it; the machine keeps what the last one said, none for a
// host run without one. Both ways of storing a report: the common one
// (on PostgreSQL without a transaction of its own) and one with service
// output.
func TestMachine_LauncherAsItsLastReportSaid(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		for _, c := range []struct {
			launcher string
			logs     bool
		}{{"1.0.0", false}, {"1.1.0", true}, {"", false}} {
			r := &models.Report{Generation: m.Generation, Outcome: models.OutcomeApplied, HostVersion: "1.1.0", LauncherVersion: c.launcher}
			if c.logs {
				r.Logs = []models.ServiceLog{{Resource: "mod.service", Why: models.LogFailed, Lines: []string{"x"}}}
			}
			sentReport(t, s, m.ID, r)
			got, err := s.Machine(ctx, "m1")
			if err != nil {
				t.Fatal(err)
			}
			if got.LauncherVersion != c.launcher || got.HostVersion != "1.1.0" {
				t.Fatalf("after a report saying launcher %q (service output %v): machine's launcher %q, host %q", c.launcher, c.logs, got.LauncherVersion, got.HostVersion)
			}
		}
	})
}

// TestMachine_VersionsNotMovedBackByAStaleReplay: a host's outbox replays
// a report of an earlier generation, made before its launcher moved
// (1.0.0 → 2.0.0) and its host (1.1.0 → 1.2.0), after its report of the
// latest generation. The machine went back to the versions the stale
// report said.
func TestMachine_VersionsNotMovedBackByAStaleReplay(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeApplied, HostVersion: "1.2.0", LauncherVersion: "2.0.0"})
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation - 1, Outcome: models.OutcomeApplied, HostVersion: "1.1.0", LauncherVersion: "1.0.0"})
		got, err := s.Machine(ctx, "m1")
		if err != nil {
			t.Fatal(err)
		}
		if got.AppliedGeneration != m.Generation || got.LauncherVersion != "2.0.0" || got.HostVersion != "1.2.0" {
			t.Fatalf("applied %d with host 1.2.0 and launcher 2.0.0; after a stale replay of generation %d the machine says host %q, launcher %q (applied %d)",
				m.Generation, m.Generation-1, got.HostVersion, got.LauncherVersion, got.AppliedGeneration)
		}
	})
}
