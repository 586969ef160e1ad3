package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// v7At is a UUIDv7 made at t.
func v7At(t time.Time) string {
	id := uuid.Must(uuid.NewV7())
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		id[i] = byte(ms >> (40 - 8*i))
	}
	return id.String()
}

// TestRetention_AHostBackOnAnOldGenerationIsNotToldTheStoreWasRestored: a
// host applied generation g1 (send s1), then g2 (send s2). Its box was
// then restored from a snapshot taken while it ran g1, longer ago than the
// keep period: it polls saying it finished g1 by send s1, a send this
// store did make to it and retention removed since. It is a conflict (no
// clock tells a removed send from a lost timeline's: a send made after a
// restore ages past the keep too), and the record said the store had been
// restored from a backup and lost the host's timeline, which was not so:
// the words name both causes.
func TestRetention_AHostBackOnAnOldGenerationIsNotToldTheStoreWasRestored(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)
		a := fixture(t, s, "a")
		s1 := w.deliver(a)
		w.report(s1, models.OutcomeApplied)
		a = w.push(a)
		s2 := w.deliver(a)
		w.report(s2, models.OutcomeApplied)

		// Before retention: the store made s1, so no conflict.
		if made, err := s.SendMade(ctx, s1.ID, a.ID, s1.Generation); err != nil || !made {
			t.Fatalf("before retention, SendMade(s1) = %v, %v; want true", made, err)
		}
		// The host keeps running g2 (polls answered 304) while time passes
		// and retention runs every 10 minutes.
		for range 12 {
			w.advance(10 * time.Minute)
			w.run(r)
		}
		// A send the store never made, made since what retention removes
		// (a lost timeline's, after a restore): still a conflict.
		lost := v7At(w.clock.Add(-time.Minute))
		if made, _ := s.SendMade(ctx, lost, a.ID, s1.Generation); made {
			t.Fatal("a made-up send is on record")
		}
		// Its box is restored from a snapshot of when it ran g1.
		conflict, _, err := s.CheckConflict(ctx, a.ID, s1.Generation, s1.ID)
		if err != nil {
			t.Fatal(err)
		}
		var why []string
		evs, _ := s.AuditEvents(ctx, 100, 0)
		for _, e := range evs {
			if e.Action == "conflict" {
				why = append(why, e.Detail)
			}
		}
		if !conflict || len(why) != 1 || !strings.Contains(why[0], "--keep-sends") || !strings.Contains(why[0], "restored from a backup") {
			t.Fatalf("%s: a host back on generation %d by send %s, removed by retention: conflict %v, the record says %q",
				s.Dialect(), s1.Generation, s1.ID, conflict, why)
		}
		// A send the store never made, made a minute ago: a conflict too.
		if conflict, _, err := s.CheckConflict(ctx, a.ID, s1.Generation, lost); err != nil || !conflict {
			t.Fatalf("a send the store never made: conflict %v, %v", conflict, err)
		}
	})
}
