package store_test

import (
	"context"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRetention_AMachineWhoseHostIsAwayDoesNotKeepEveryDeclaration: a
// machine's host applied a generation and went away (a box nobody
// deleted). People kept changing the fleet and looking at the machine's
// declaration (its page composes and stores it). Every declaration past
// what the host applied was kept for good — the rule that keeps them while
// an instance may still answer with one — so a host that never came back
// kept them all. They go once the generation has not moved for a while.
func TestRetention_AMachineWhoseHostIsAwayDoesNotKeepEveryDeclaration(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)
		a := fixture(t, s, "a")
		s0 := w.deliver(a)
		w.report(s0, models.OutcomeApplied)
		applied := a.Generation
		for range 20 {
			a = w.push(a)
			if _, _, err := s.Compose(ctx, []int64{a.ID}, "ctl-test", w.sg); err != nil {
				t.Fatal(err)
			}
			w.advance(10 * time.Minute)
			w.run(r)
		}
		for range 18 {
			w.advance(10 * time.Minute)
			w.run(r)
		}
		var gens []int64
		s.DB().Raw("SELECT generation FROM declarations WHERE machine_id = ? ORDER BY generation", a.ID).Scan(&gens)
		if len(gens) != 2 || gens[0] != applied || gens[1] != a.Generation {
			t.Fatalf("%s: three hours on, with a keep of %s, machine a keeps declarations of generations %v; want the applied %d and the current %d",
				s.Dialect(), r.Keep, gens, applied, a.Generation)
		}
	})
}
