package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// TestReports_AtOnceGuardsWhatItRead: on PostgreSQL the common report is
// stored without a transaction of its own (its machine read, then its row
// and the machine's summary written by one statement). A report whose
// machine moved on between that read and that write (another report of a
// newer generation stored meanwhile) must not move the machine back, and
// is stored once, not twice; one on an unchanged machine is stored in
// those two statements.
func TestReports_AtOnceGuardsWhatItRead(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			s := storetest.MustOpen(t, d)
			ctx := context.Background()
			id := fixtures(t, s, 1)[0]
			sendOf := func(gen int64) string { return recordSend(t, s, id, gen) }
			between := 0
			s.SetBeforeReportWrite(func(atOnce bool) {
				if !atOnce {
					return
				}
				if between++; between == 1 {
					// What a report of generation 2 stored meanwhile leaves.
					if err := s.DB().Exec("UPDATE machines SET applied_generation = 2, finished_generation = 2 WHERE id = ?", id).Error; err != nil {
						t.Error(err)
					}
				}
			})
			r := &models.Report{Send: sendOf(1), Generation: 1, Outcome: models.OutcomeApplied}
			if _, err := s.InsertReport(ctx, id, r, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if d == store.Postgres && between != 1 {
				t.Fatalf("the report was not stored at once (the hook ran %d times)", between)
			}
			m, err := s.Machine(ctx, "m0")
			if err != nil {
				t.Fatal(err)
			}
			if d == store.Postgres && (m.AppliedGeneration != 2 || m.FinishedGen != 2) {
				t.Fatalf("a report of generation 1 moved the machine back to applied %d, finished %d", m.AppliedGeneration, m.FinishedGen)
			}
			rows, _, err := s.Reports(ctx, id, 10, 0)
			if err != nil || len(rows) != 1 || rows[0].Generation != 1 {
				t.Fatalf("the report stored %d times (%v): %+v", len(rows), err, rows)
			}

			r = &models.Report{Send: sendOf(3), Generation: 3, Outcome: models.OutcomeApplied}
			before := s.Statements()
			if _, err := s.InsertReport(ctx, id, r, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if n := s.Statements() - before; d == store.Postgres && n != 2 {
				t.Fatalf("a report on an unchanged machine took %d statements, want 2", n)
			}
			if m, err := s.Machine(ctx, "m0"); err != nil || m.AppliedGeneration != 3 || m.FinishedGen != 3 {
				t.Fatalf("after a report of generation 3: applied %d, finished %d (%v)", m.AppliedGeneration, m.FinishedGen, err)
			}
			if d != store.Postgres {
				return
			}

			// A write the engine refuses is the report's answer, not run
			// again the transaction's way: a write whose reply was lost
			// after its commit would be stored twice.
			if err := s.DB().Exec("ALTER TABLE reports ADD CONSTRAINT no_poison CHECK (reason <> 'poison')").Error; err != nil {
				t.Fatal(err)
			}
			r = &models.Report{Send: sendOf(4), Generation: 4, Outcome: models.OutcomeFailed, Reason: "poison"}
			before = s.Statements()
			if _, err := s.InsertReport(ctx, id, r, []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "no_poison") {
				t.Fatalf("a report the engine refused: %v", err)
			}
			if n := s.Statements() - before; n != 2 {
				t.Fatalf("a refused write took %d statements, want 2: it was run again", n)
			}
		})
	}
}

// TestReports_OneMachineOneAfterTheOther: two reports of one machine
// stored the transaction's way at once (each with service output) are
// stored one after the other: the second reads what the first wrote. A
// report of generation 1 paused between its read and its write, while
// one of generation 2 comes in, must not move the machine back to 1.
func TestReports_OneMachineOneAfterTheOther(t *testing.T) {
	s := storetest.MustOpen(t, store.Postgres)
	ctx := context.Background()
	id := fixtures(t, s, 1)[0]
	send1, send2 := recordSend(t, s, id, 1), recordSend(t, s, id, 2)
	logs := []models.ServiceLog{{Resource: "web", Lines: []string{"started"}}}
	done := make(chan error, 1)
	paused := false
	s.SetBeforeReportWrite(func(atOnce bool) {
		if atOnce || paused {
			return
		}
		paused = true
		go func() {
			_, err := s.InsertReport(ctx, id, &models.Report{Send: send2, Generation: 2, Outcome: models.OutcomeApplied, Logs: logs}, []byte(`{}`))
			done <- err
		}()
		// Until the report of generation 2 is stored, or waits for this
		// one's lock on the machine.
		if !testwait.Until(10*time.Second, func() bool {
			select {
			case err := <-done:
				done <- err
				return true
			default:
			}
			var waiting int
			if err := s.DB().Raw(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
				AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE OF machines%'`).Row().Scan(&waiting); err != nil {
				t.Error(err)
				return true
			}
			return waiting > 0
		}) {
			t.Error("the report of generation 2 neither finished nor waited")
		}
	})
	if _, err := s.InsertReport(ctx, id, &models.Report{Send: send1, Generation: 1, Outcome: models.OutcomeApplied, Logs: logs}, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m, err := s.Machine(ctx, "m0")
	if err != nil {
		t.Fatal(err)
	}
	if m.AppliedGeneration != 2 {
		t.Fatalf("two reports of one machine at once left it at applied generation %d, want 2", m.AppliedGeneration)
	}
}
