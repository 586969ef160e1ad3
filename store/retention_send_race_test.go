package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRetention_ASendWrittenAsTheGenerationMovesKeepsItsDeclaration: a
// generation was composed ahead of a poll, its host away for longer than
// the keep period. The host came back; its poll was answered with that
// generation (the declaration read, or an instance's memory of it) and,
// before the send row was written (it is written before the bytes leave),
// the machine was pushed, the next generation composed and retention ran.
// The send was then written: a 200 on record, the machine's latest send,
// whose declaration retention had removed the instant before, and which
// its host applied. A declaration past what the host last applied or
// finished now stays.
func TestRetention_ASendWrittenAsTheGenerationMovesKeepsItsDeclaration(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)
		a := fixture(t, s, "a")
		s0 := w.deliver(a)
		w.report(s0, models.OutcomeApplied)
		a = w.push(a)
		if _, _, err := s.Compose(ctx, []int64{a.ID}, "ctl-test", w.sg); err != nil { // ahead of a poll
			t.Fatal(err)
		}
		g := a.Generation
		// Its host is away; retention runs every 10 minutes, until its next
		// run is one that judges generation g's declaration.
		for i := 0; ; i++ {
			if i > 40 {
				t.Fatal("the declaration was never judged")
			}
			w.advance(10 * time.Minute)
			if s.Dialect() == store.SQLite {
				if i >= 7 {
					break
				}
			} else {
				var epoch int64
				s.DB().Raw("SELECT epoch FROM declarations WHERE machine_id = ? AND generation = ?", a.ID, g).Scan(&epoch)
				var next []time.Time
				s.DB().Raw("SELECT started_at FROM retention_epochs WHERE epoch > ? ORDER BY epoch LIMIT 1", epoch).Scan(&next)
				var oldest int64
				s.DB().Raw("SELECT min(epoch) FROM retention_epochs").Scan(&oldest)
				if i >= 7 && epoch == oldest && len(next) == 1 && next[0].Before(w.clock.Add(-r.Keep)) {
					break // the next run drops the declaration's epoch
				}
			}
			w.run(r)
		}

		// The host polls: generation g is composed (reused) for its answer.
		got, fails, err := s.Compose(ctx, []int64{a.ID}, "ctl-test", w.sg)
		if err != nil || fails[a.ID] != nil || got[a.ID].Generation != g {
			t.Fatalf("compose: %v %v %+v", err, fails[a.ID], got[a.ID])
		}
		c := got[a.ID]
		// Meanwhile: a push, its fan-out composes, retention runs.
		a = w.push(a)
		if _, _, err := s.Compose(ctx, []int64{a.ID}, "ctl-test", w.sg); err != nil {
			t.Fatal(err)
		}
		res := w.run(r)
		t.Logf("%s: %+v", s.Dialect(), res)
		// The answer's send row is written, then its bytes leave.
		snd := models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: a.ID, Generation: c.Generation, Digest: c.Digest,
			InstanceID: "ctl-test", Trigger: c.Trigger, CreatedAt: w.clock}
		if err := s.InsertSends(ctx, []models.Send{snd}); err != nil {
			t.Fatal(err)
		}
		w.report(snd, models.OutcomeApplied) // its host applied it
		if _, err := s.Declaration(ctx, a.ID, g); err != nil {
			t.Fatalf("send %s of generation %d (a 200, the machine's latest send; its host applied it) is on record, the declaration it carried is gone: %v",
				snd.ID, g, err)
		}
		w.run(r)
		if _, err := s.Declaration(ctx, a.ID, g); err != nil {
			t.Fatalf("after the next run: %v", err)
		}
	})
}
