package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// BenchmarkCompose_Batch500: composing 500 machines in one batch, the unit
// of a fan-out.
func BenchmarkCompose_Batch500(b *testing.B) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		b.Run(d, func(b *testing.B) {
			s := storetest.MustOpen(b, d)
			ctx := context.Background()
			if err := s.CreateModule(ctx, "t", &models.Module{Name: "mod", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
				b.Fatal(err)
			}
			if err := s.CreateBuild(ctx, "t", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
				b.Fatal(err)
			}
			mod, _ := s.Module(ctx, "mod")
			now := time.Now().UTC()
			ms := make([]models.Machine, 500)
			for i := range ms {
				ms[i] = models.Machine{Name: fmt.Sprintf("m%03d", i), Generation: 1, GenerationAt: now, Running: "{}", CreatedAt: now}
			}
			s.DB().Create(&ms)
			ids := make([]int64, len(ms))
			for i, m := range ms {
				ids[i] = m.ID
				s.DB().Create(&models.Assignment{MachineID: m.ID, ModuleID: mod.ID, CreatedAt: now})
				s.DB().Create(&models.MachineVariable{MachineID: m.ID, Key: "port", Value: "9000"})
			}
			sg := newSigner()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				s.DB().Exec("UPDATE machines SET generation = generation + 1")
				b.StartTimer()
				if _, fails, err := s.Compose(ctx, ids, "ctl", sg); err != nil || len(fails) > 0 {
					b.Fatal(err, fails)
				}
			}
		})
	}
}
