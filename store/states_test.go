package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestMachineStatesBefore_EveryMachineOfAState: the store's narrowing of
// a state's listing keeps every machine the rules put in that state, for
// every state, newest first, a batch at a time below a cursor; a machine
// the narrowing dropped would be missing from the operator's list.
func TestMachineStatesBefore_EveryMachineOfAState(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		// Each machine gets one of these, so every state, and the near
		// misses beside them, is in the fleet more than once.
		long := time.Now().Add(-48 * time.Hour).UTC()
		recent := time.Now().Add(-time.Minute).UTC()
		// Judged at a time with a fraction of a microsecond, a host last
		// heard exactly the offline threshold before it, to the
		// microsecond the store keeps, is offline by a few hundred
		// nanoseconds.
		rules := models.DefaultStateRules
		now := time.Now().UTC().Truncate(time.Microsecond).Add(500 * time.Nanosecond)
		edge := now.Add(-rules.OfflineAfter).Truncate(time.Microsecond)
		shapes := []string{
			`generation = 3, finished_generation = 3, last_outcome = 'applied'`,
			`conflict = ?`,
			`revoked_at = ?`,
			`last_seen = ?`,
			`last_seen = ?`,
			`last_seen = NULL, created_at = ?`,
			`last_seen = NULL, generation = 3, finished_generation = 3`,
			`last_outcome = 'rolled_back'`,
			`target_host_version = '1.1', host_version = '1.0'`,
			`target_host_version = '1.1', host_version = '1.1'`,
			`generation = 4, finished_generation = 3, last_outcome = 'failed'`,
			`generation = 3, finished_generation = 3, last_outcome = 'failed'`,
			`generation = 4, finished_generation = 3, last_outcome = 'applied'`,
			`generation = 3, finished_generation = 3, held_back = 'held back: needs host schema 2'`,
			`generation = 3, finished_generation = 3, last_outcome = 'refused'`,
			`generation = 3, finished_generation = 3, last_outcome = 'rejected'`,
			`generation = 3, finished_generation = 3, health = 'failing', health_check = 'http', health_since = ?`,
			`generation = 3, finished_generation = 3, health = 'failing', health_check = 'http', health_since = ?`,
		}
		args := [][]any{nil, {true}, {recent}, {long}, {edge}, {long}, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, {long}, {recent}}
		const n = 60
		for i := range n {
			m := enrolAs(t, s, fmt.Sprintf("m%02d", i), fmt.Sprintf("tok%d", i))
			k := i % len(shapes)
			if err := s.DB().Exec("UPDATE machines SET last_seen = ? WHERE id = ?", recent, m.ID).Error; err != nil {
				t.Fatal(err)
			}
			q := "UPDATE machines SET " + shapes[k] + " WHERE id = ?"
			if err := s.DB().Exec(q, append(slices.Clone(args[k]), m.ID)...).Error; err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		all, err := s.MachineStates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, state := range models.MachineStates() {
			var want []int64
			for i := range all {
				if rules.State(&all[i], all[i].LastSeen, now) == state {
					want = append(want, all[i].ID)
				}
			}
			want = slices.Sorted(slices.Values(want))
			slices.Reverse(want)
			// Read in batches of 7 below a moving cursor, as a page does.
			var got []int64
			var before int64
			for {
				batch, err := s.MachineStatesBefore(ctx, state, rules, now, before, 7)
				if err != nil {
					t.Fatal(err)
				}
				for i, m := range batch {
					if i > 0 && m.ID >= batch[i-1].ID || before > 0 && m.ID >= before {
						t.Fatalf("%s: batch below %d not newest first: %v", state, before, batch)
					}
					if rules.State(&batch[i], m.LastSeen, now) == state {
						got = append(got, m.ID)
					}
				}
				if len(batch) < 7 {
					break
				}
				before = batch[len(batch)-1].ID
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: the narrowed batches hold %v, the rules put %v in it", state, got, want)
			}
			seen[state] = len(want)
		}
		for _, state := range models.MachineStates() {
			if seen[state] == 0 {
				t.Errorf("no machine of the fleet is %s: the test does not cover it (%v)", state, seen)
			}
		}
	})
}
