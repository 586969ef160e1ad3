package store_test

import (
	"context"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// BenchmarkSetCurrent_10000: the change that starts a fan-out — a module's
// current build moved, 10,000 machines' generations bumped in the one
// transaction — in CPU of this process per machine. Every declaration of
// the fan-out waits for it to commit.
func BenchmarkSetCurrent_10000(b *testing.B) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		b.Run(d, func(b *testing.B) {
			s := storetest.MustOpen(b, d)
			ctx := context.Background()
			ids := batchFleet(b, s, 10000, manifest)
			if err := s.CreateBuild(ctx, "t", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
				b.Fatal(err)
			}
			var spent time.Duration
			b.ResetTimer()
			for n := range b.N {
				cpu0 := processCPU()
				touched, err := s.SetCurrent(ctx, "t", "mod", int64(2-n%2), "the bench goes back and forth")
				if err != nil || touched != len(ids) {
					b.Fatal(touched, err)
				}
				spent += processCPU() - cpu0
			}
			b.ReportMetric(float64(spent.Microseconds())/float64(b.N*len(ids)), "cpu-µs/machine")
		})
	}
}
