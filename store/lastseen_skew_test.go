package store_test

import (
	"context"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestLastSeen_AnInstanceAheadDoesNotHideAnOfflineHost: two controller
// instances share the store; instance A's clock runs ten minutes ahead of
// B's. The host polled A once and died. A flushed last_seen at its own
// time — ten minutes in the future by B's clock — and it was never moved
// back (the later time is kept). Four minutes on, past the offline time,
// B said the machine was not offline, its host "last seen" in the future,
// until 13 minutes after the host went. A time past the store's clock is
// now written as the store's clock.
func TestLastSeen_AnInstanceAheadDoesNotHideAnOfflineHost(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clock := time.Now().UTC().Truncate(time.Millisecond) // instance B's clock, and the true time
		s.Now = func() time.Time { return clock }
		m := enrolAs(t, s, "m1", "enrol-m1")
		const ahead = 10 * time.Minute
		gone := clock
		// Instance A heard the host's last poll now, by its clock.
		if err := s.FlushLastSeen(ctx, []store.Seen{{ID: m.ID, At: gone.Add(ahead)}}); err != nil {
			t.Fatal(err)
		}
		clock = gone.Add(s.Rules.OfflineAfter + time.Minute)
		got, err := s.Machine(ctx, "m1")
		if err != nil {
			t.Fatal(err)
		}
		seen := models.LastSeen(nil, got)
		if st := s.Rules.State(got, seen, clock); st != models.StateOffline {
			t.Fatalf("the host was last heard %s ago (offline after %s); instance B reads the machine %s, last seen %v (%s in its future)",
				clock.Sub(gone), s.Rules.OfflineAfter, st, seen, seen.Sub(clock))
		}
	})
}
