package store_test

import (
	"context"
	"fmt"
	"testing"

	"mesh/store"
	"mesh/store/storetest"
)

// TestRollout_ADeletedCanaryIsReplaced: the one canary is deleted before it
// tried the release; the next machine takes its place (as a revoked one's).
func TestRollout_ADeletedCanaryIsReplaced(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a")
		fixture(t, s, "b")
		fixture(t, s, "c")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0") // one canary (a), then b and c
		if err := s.DeleteMachine(ctx, "user:admin", "a"); err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		got := map[string]string{}
		for _, m := range ro.Machines {
			got[m.Machine] = fmt.Sprintf("wave %d %s", m.Wave, m.State)
		}
		if got["b"] != "wave 0 upgrading" || got["c"] != "wave 1 pending" {
			t.Fatalf("rollout %s: %v (the deleted canary a was not replaced)", ro.State, got)
		}
	})
}

// TestRollout_AWithdrawnCanaryOfAnotherPlatformIsReplaced: 1.5.0 is
// rolled out for amd64 and arm64 at once; its one canary (a, amd64) is
// revoked before it tried the release. The waiting machines are arm64's:
// one of them takes the canary's place, else they go on untried.
func TestRollout_AWithdrawnCanaryOfAnotherPlatformIsReplaced(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a")
		armFixture(t, s, "b1")
		armFixture(t, s, "b2")
		armFixture(t, s, "b3")
		release(t, s, "1.5.0", "amd64", "1")
		release(t, s, "1.5.0", "arm64", "1")
		rollOut(t, s, "1.5.0")
		ro, _ := s.Rollout(ctx, "1.5.0")
		got := map[string]string{}
		for _, m := range ro.Machines {
			got[m.Machine] = fmt.Sprintf("wave %d %s", m.Wave, m.State)
		}
		if got["a"] != "wave 0 upgrading" {
			t.Fatalf("the rollout's one canary is not a (amd64): %v", got)
		}
		if _, err := s.RevokeMachine(ctx, "user:admin", "a", "stolen"); err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ = s.Rollout(ctx, "1.5.0")
		got = map[string]string{}
		canaries := 0
		for _, m := range ro.Machines {
			got[m.Machine] = fmt.Sprintf("wave %d %s", m.Wave, m.State)
			if m.Machine != "a" && m.Wave == 0 {
				canaries++
			}
		}
		if canaries == 0 {
			t.Fatalf("rollout %s: %v (the withdrawn canary a was not replaced; arm64's machines wait for no canary)", ro.State, got)
		}
	})
}
