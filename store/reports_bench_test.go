package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// BenchmarkInsertReport_500: the reports that follow a fan-out — 500
// machines each reporting its declaration applied, one transaction a
// report as the API stores them — in CPU of this process per report.
func BenchmarkInsertReport_500(b *testing.B) { insertReports(b, 1) }

// BenchmarkInsertReport_500Together: the same reports from 50 hosts at a
// time, as a fleet's arrive after a change.
func BenchmarkInsertReport_500Together(b *testing.B) { insertReports(b, 50) }

func insertReports(b *testing.B, together int) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		b.Run(d, func(b *testing.B) {
			s := storetest.MustOpen(b, d)
			ctx := context.Background()
			ids := batchFleet(b, s, 500, manifest)
			sg := newSigner()
			var spent time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				s.DB().Exec("UPDATE machines SET generation = generation + 1")
				got, fails, err := s.Compose(ctx, ids, "ctl", sg)
				if err != nil || len(fails) > 0 {
					b.Fatal(err, fails)
				}
				sends := make([]models.Send, 0, len(ids))
				for _, id := range ids {
					sends = append(sends, models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: id, Generation: got[id].Generation,
						Digest: got[id].Digest, InstanceID: "ctl", CreatedAt: time.Now().UTC()})
				}
				if err := s.InsertSends(ctx, sends); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				cpu0 := processCPU()
				var wg sync.WaitGroup
				errs := make(chan error, len(ids))
				for w := range together {
					wg.Go(func() {
						for i := w; i < len(ids); i += together {
							now := time.Now().UTC()
							r := &models.Report{Send: sends[i].ID, Generation: sends[i].Generation, Digest: sends[i].Digest,
								Outcome: models.OutcomeApplied, HostVersion: "1.0.0", StartedAt: &now, FinishedAt: &now,
								Running: map[string]models.RunningBuild{"mod": {Build: 1}}}
							if _, err := s.InsertReport(ctx, ids[i], r, []byte(`{"outcome":"applied"}`)); err != nil {
								errs <- err
								return
							}
						}
					})
				}
				wg.Wait()
				spent += processCPU() - cpu0
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(spent.Microseconds())/float64(b.N*len(ids)), "cpu-µs/report")
		})
	}
}
