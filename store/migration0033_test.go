package store_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestMigration0033_ThePreviousDefaultStillReaches: a store whose fleet
// rolled out 1.4.0 and then 1.5.0 before migration 0033 is upgraded. Its
// backfill marked only the default's releases rolled out; when 1.5.0's
// trial host rolled back after its upgraded report, the default went back
// to 1.4.0, whose release had no mark, and the default reached no machine.
func TestMigration0033_ThePreviousDefaultStillReaches(t *testing.T) {
	mig, err := os.ReadFile("../migrations/sqlite/0033_release_rolled_out.sql")
	if err != nil {
		t.Fatal(err)
	}
	var backfill string
	for _, stmt := range strings.Split(string(mig), ";") {
		if i := strings.Index(stmt, "UPDATE host_releases"); i >= 0 {
			backfill = stmt[i:]
		}
	}
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a1 := fixture(t, s, "a1")
		release(t, s, "1.4.0", "amd64", "1")
		rollOut(t, s, "1.4.0")
		upgradedTo(t, s, "a1", "1.4.0")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		upgradedTo(t, s, "a1", "1.5.0")
		if def, _ := s.HostDefault(ctx); def != "1.5.0" {
			t.Fatalf("default %q", def)
		}
		// The store as 0033 leaves one upgraded with this history.
		if err := s.DB().Exec("UPDATE host_releases SET rolled_out_at = NULL").Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Exec(backfill).Error; err != nil {
			t.Fatal(err)
		}
		// 1.5.0's trial host rolls back after its upgraded report.
		if err := s.RecordHostInfo(ctx, a1.ID, "1.4.0", "1"); err != nil {
			t.Fatal(err)
		}
		m, _ := s.Machine(ctx, "a1")
		sentReport(t, s, a1.ID, &models.Report{Generation: m.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.4.0",
			Reason: models.RolledBackReason("1.5.0", "1.4.0", "killed by signal 9")})
		if def, _ := s.HostDefault(ctx); def != "1.4.0" {
			t.Fatalf("default after the rollback %q, want 1.4.0", def)
		}
		m9 := fixture(t, s, "m9")
		if got := composedHost(t, s, m9); got != "1.4.0 amd64" {
			t.Fatalf("the fleet default is 1.4.0 again, rolled out and done, yet m9 (no target of its own) is composed with host %q", got)
		}
	})
}
