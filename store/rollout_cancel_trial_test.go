package store_test

import (
	"context"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRollout_RolledBackWhileUpgradingInACancelledRollout: the canary's host
// is on trial of 1.5.0 (the old host applied the generation naming it, no
// upgraded report yet) when the operator cancels the rollout. The trial then
// fails (the build crashes at its start) and the launcher puts 1.0.0 back,
// whose host reports rolled_back and refuses 1.5.0's digest for good. The
// controller should say so: the machine's row not "upgrading", its target
// not 1.5.0 (a release its host refuses for ever), the release failed.
func TestRollout_RolledBackWhileUpgradingInACancelledRollout(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := fixture(t, s, "a")
		fixture(t, s, "b")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		applied(t, s, "a", 1) // the old host applies the generation naming 1.5.0, and hands over
		if _, err := s.SetRolloutState(ctx, "test", "1.5.0", "cancel"); err != nil {
			t.Fatal(err)
		}
		rolledBackFrom(t, s, a.ID, "1.5.0", "it exited before completing a reconcile (exit status 2)")
		applied(t, s, "a", 1)
		ro, _ := s.Rollout(ctx, "1.5.0")
		rs, _ := s.Releases(ctx, 10, 0)
		m, _ := s.Machine(ctx, "a")
		now := time.Now()
		st := s.Rules.State(m, &now, now)
		row := ""
		for _, rm := range ro.Machines {
			if rm.Machine == "a" {
				row = rm.State
			}
		}
		t.Logf("rollout %s; a: row %s, host %s, target %q, state %s; release %s", ro.State, row, m.HostVersion, m.TargetHostVersion, st, rs[0].State)
		if row == models.UpgradeUpgrading || m.TargetHostVersion == "1.5.0" || st == models.StateUpgrading || rs[0].State != models.ReleaseFailed {
			t.Fatalf("a rolled 1.5.0 back (its trial crashed) after the rollout was cancelled: row %s, target %q, state %s, release %s",
				row, m.TargetHostVersion, st, rs[0].State)
		}
	})
}

// TestRollout_UpgradedWhileUpgradingInACancelledRollout: the same, but the
// trial succeeds: its upgraded report is accepted after the cancel. The
// machine runs 1.5.0; its rollout row should not say "upgrading" for ever.
func TestRollout_UpgradedWhileUpgradingInACancelledRollout(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a")
		fixture(t, s, "b")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		applied(t, s, "a", 1)
		if _, err := s.SetRolloutState(ctx, "test", "1.5.0", "cancel"); err != nil {
			t.Fatal(err)
		}
		upgradedTo(t, s, "a", "1.5.0")
		applied(t, s, "a", 1)
		ro, _ := s.Rollout(ctx, "1.5.0")
		m, _ := s.Machine(ctx, "a")
		row := ""
		for _, rm := range ro.Machines {
			if rm.Machine == "a" {
				row = rm.State
			}
		}
		t.Logf("rollout %s; a: row %s, host %s, target %q", ro.State, row, m.HostVersion, m.TargetHostVersion)
		if m.HostVersion == "1.5.0" && row == models.UpgradeUpgrading {
			t.Fatalf("a runs 1.5.0 (its upgraded report accepted) but the cancelled rollout shows it %s for ever", row)
		}
	})
}
