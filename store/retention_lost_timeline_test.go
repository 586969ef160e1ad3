package store_test

import (
	"context"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRetention_ALostTimelineOlderThanTheKeepIsStillAConflict: DESIGN says
// "a lost timeline's sends were made after its backup, so after any cutoff
// the backup holds". But the restored store kept running retention, and
// each run moved the recorded cutoff to now − keep: once the lost
// timeline's send was older than the keep period, it read as one
// retention removed. The store is restored from a backup taken at
// generation 1; on the lost timeline, generation 2 (other content) was
// sent to the host by send L and applied. The host is off (a laptop, a box
// in a closet) for longer than --keep-sends; the restored store meanwhile
// reuses generation 2 for its own content. The host comes back saying it
// finished generation 2 by L, a send this store never made: that is the
// lost-timeline conflict DESIGN describes (left alone, it is shown current
// on content the store does not hold, for good). Judged by the send's
// time against a recorded cutoff, it was no conflict.
func TestRetention_ALostTimelineOlderThanTheKeepIsStillAConflict(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)
		a := fixture(t, s, "a")
		s1 := w.deliver(a)
		w.report(s1, models.OutcomeApplied)
		// The backup is here. On the lost timeline: generation 2, send L,
		// applied by the host; then the store is restored from the backup.
		w.advance(time.Minute)
		lost := v7At(w.clock)
		// The host is away; the restored store runs, retention every 10
		// minutes, for two keep periods; it reuses generation 2.
		for range 12 {
			w.advance(10 * time.Minute)
			w.run(r)
		}
		g := a.Generation + 1 // the lost timeline's generation
		a = w.push(a)
		if a.Generation != g {
			t.Fatalf("the restored store is at generation %d", a.Generation)
		}
		if made, _ := s.SendMade(ctx, lost, a.ID, g); made {
			t.Fatal("the lost timeline's send is on record")
		}
		// The host comes back: it finished generation 2 by L.
		conflict, _, err := s.CheckConflict(ctx, a.ID, g, lost)
		if err != nil {
			t.Fatal(err)
		}
		if !conflict {
			t.Fatalf("%s: a host that finished generation %d by send %s, made on a timeline the store lost (after its backup, "+
				"%s ago), is not in conflict: the restored store's own retention moved the cutoff past it, and the host is shown current "+
				"on content the store never held", s.Dialect(), g, lost, 2*time.Hour)
		}
	})
}

// TestRetention_ACutoffFromAClockAheadDoesNotBlindConflicts: the recorded
// cutoff only moves forward, and is now − keep by the clock of whichever
// instance ran retention. One run by an instance whose clock was a year
// ahead (a bad RTC, a mistyped date; fixed an hour later) records a cutoff
// a year ahead, and for that year every send the store does not hold —
// any lost timeline's, however recent — read as one retention removed:
// the conflict check was off for the whole fleet, silently, when the
// cutoff was judged by time.
func TestRetention_ACutoffFromAClockAheadDoesNotBlindConflicts(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)
		a := fixture(t, s, "a")
		s1 := w.deliver(a)
		w.report(s1, models.OutcomeApplied)
		// One instance's clock is a year ahead for one retention run.
		right := w.clock
		w.clock = right.Add(365 * 24 * time.Hour)
		w.run(r)
		w.clock = right.Add(time.Hour) // fixed
		w.run(r)
		// A week later: a send the store never made, made a minute ago
		// (a lost timeline's, after a restore), at the machine's generation.
		w.advance(7 * 24 * time.Hour)
		lost := v7At(w.clock.Add(-time.Minute))
		if made, _ := s.SendMade(ctx, lost, a.ID, a.Generation); made {
			t.Fatal("a made-up send is on record")
		}
		conflict, _, err := s.CheckConflict(ctx, a.ID, a.Generation, lost)
		if err != nil {
			t.Fatal(err)
		}
		if !conflict {
			t.Fatalf("%s: a send this store never made, a minute old, is not a conflict: one retention run by a clock a year "+
				"ahead recorded a cutoff a year ahead, and every unknown send since reads as one retention removed", s.Dialect())
		}
	})
}
