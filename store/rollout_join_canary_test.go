package store_test

import (
	"context"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRollout_AJoinedPlatformsWithdrawnCanaryIsReplaced: arm64 joins the
// running rollout of 1.5.0 with a canary of its own, which is revoked
// before it tries the binary. The amd64 canary, upgraded, counted as the
// wave's canary, so arm64 got no replacement and b2 went untried on arm64.
func TestRollout_AJoinedPlatformsWithdrawnCanaryIsReplaced(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a1")
		armFixture(t, s, "b1")
		armFixture(t, s, "b2")
		armFixture(t, s, "b3")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		release(t, s, "1.5.0", "arm64", "1") // joins: one arm64 canary
		ro, _ := s.Rollout(ctx, "1.5.0")
		canary := ""
		for _, m := range ro.Machines {
			if m.Wave == 0 && m.Machine != "a1" {
				canary = m.Machine
			}
		}
		if canary == "" {
			t.Fatalf("no arm64 canary: %+v", ro.Machines)
		}
		upgradedTo(t, s, "a1", "1.5.0") // amd64's canary tried it
		if _, err := s.RevokeMachine(ctx, "user:admin", canary, "stolen"); err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ = s.Rollout(ctx, "1.5.0")
		armCanaries := 0
		for _, m := range ro.Machines {
			t.Logf("%s wave %d %s %q", m.Machine, m.Wave, m.State, m.Reason)
			if m.Machine != "a1" && m.Machine != canary && m.Wave == 0 {
				armCanaries++
			}
		}
		for _, m := range ro.Machines {
			if m.Machine != "a1" && m.Machine != canary && m.Wave > 0 && m.State == models.UpgradeUpgrading && armCanaries == 0 {
				t.Fatalf("arm64's canary %s was withdrawn and none replaced it: %s goes in wave %d untried on arm64", canary, m.Machine, m.Wave)
			}
		}
		if armCanaries == 0 {
			t.Fatalf("arm64's canary %s was withdrawn and no arm64 machine replaced it", canary)
		}
	})
}
