package store_test

import (
	"context"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRetention_AYoungReportKeepsTheSendItNames: a host applied a
// generation long ago and reported on it since (a certificate renewed,
// checks between applies: each report names the applied send), then
// applied a newer generation. The reports on the old generation were
// younger than the keep period and stayed; the send they named was older,
// no longer the machine's applied one, and was removed: a report on record
// named a send that was not, and one of them still in a host's outbox was
// refused for naming no send. A send a report on record names now stays.
func TestRetention_AYoungReportKeepsTheSendItNames(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)

		m := fixture(t, s, "m1")
		s1 := w.deliver(m)
		w.report(s1, models.OutcomeApplied)
		// Its host renews a certificate of what it applied now and then:
		// each report names s1, the applied send.
		for range 5 {
			w.advance(10 * time.Minute)
			w.run(r)
			w.report(s1, models.OutcomeRenewed)
		}
		// Then a change, applied.
		m = w.push(m)
		s2 := w.deliver(m)
		w.report(s2, models.OutcomeApplied)

		for range 4 {
			w.advance(10 * time.Minute)
			w.run(r)
			var reps []models.ReportRow
			s.DB().Order("id DESC").Find(&reps) // the youngest first
			for _, rep := range reps {
				if rep.SendID == "" {
					continue
				}
				var n int64
				s.DB().Raw("SELECT count(*) FROM sends WHERE id = ?", rep.SendID).Scan(&n)
				if n == 0 {
					t.Fatalf("report %d (%s, generation %d, made %s ago, keep %s) is on record, the send %s it names is gone",
						rep.ID, rep.Outcome, rep.Generation, w.clock.Sub(rep.CreatedAt), r.Keep, rep.SendID)
				}
				if _, err := s.Declaration(ctx, m.ID, rep.Generation); err != nil {
					t.Fatalf("report %d (%s, generation %d, made %s ago) is on record, its generation's declaration is gone: %v",
						rep.ID, rep.Outcome, rep.Generation, w.clock.Sub(rep.CreatedAt), err)
				}
			}
		}
	})
}
