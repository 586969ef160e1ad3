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

// BenchmarkInsertSends_1000: one group commit of 1,000 send rows (the send
// writer's largest group), in CPU of this process per row.
func BenchmarkInsertSends_1000(b *testing.B) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		b.Run(d, func(b *testing.B) {
			s := storetest.MustOpen(b, d)
			ctx := context.Background()
			machines := batchFleet(b, s, 500, "")
			ids := append(append([]int64{}, machines...), machines...) // two sends each
			var spent time.Duration
			b.ResetTimer()
			for n := range b.N {
				b.StopTimer()
				now := time.Now().UTC()
				sends := make([]models.Send, len(ids))
				for i, id := range ids {
					sends[i] = models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: id, Generation: int64(2*n + 2 + i/len(machines)),
						Digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", InstanceID: "ctl",
						Trigger: "plan", CreatedAt: now, Schema: 1}
				}
				b.StartTimer()
				cpu0 := processCPU()
				if err := s.InsertSends(ctx, sends); err != nil {
					b.Fatal(err)
				}
				spent += processCPU() - cpu0
			}
			b.ReportMetric(float64(spent.Microseconds())/float64(b.N*len(ids)), "cpu-µs/row")
		})
	}
}
