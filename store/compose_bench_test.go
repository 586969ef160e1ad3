package store_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
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
			ids := batchFleet(b, s, 500, manifest)
			sg := newSigner()
			var spent time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				s.DB().Exec("UPDATE machines SET generation = generation + 1")
				b.StartTimer()
				cpu0 := processCPU()
				if _, fails, err := s.Compose(ctx, ids, "ctl", sg); err != nil || len(fails) > 0 {
					b.Fatal(err, fails)
				}
				spent += processCPU() - cpu0
			}
			// The process's CPU while composing (the shared machine's wall
			// clock says as much about the neighbours); PostgreSQL's own is
			// not in it.
			b.ReportMetric(float64(spent.Microseconds())/float64(b.N*len(ids)), "cpu-µs/machine")
		})
	}
}

// processCPU is the CPU this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompose_569Resources: composing one declaration of 569
// resources (target: under 50 ms).
func BenchmarkCompose_569Resources(b *testing.B) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		b.Run(d, func(b *testing.B) {
			s := storetest.MustOpen(b, d)
			ctx := context.Background()
			var res []string
			for i := range 569 {
				res = append(res, fmt.Sprintf(`{"name": "f%03d", "kind": "file", "path": "/etc/mod/f%03d.conf", "content": "port=${var.port}\nmachine=${machine.name}\n"}`, i, i))
			}
			if err := s.CreateModule(ctx, "t", &models.Module{Name: "mod", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
				b.Fatal(err)
			}
			if err := s.CreateBuild(ctx, "t", "mod", &models.Build{Manifest: `{"resources": [` + strings.Join(res, ",") + `]}`}, nil); err != nil {
				b.Fatal(err)
			}
			m := fixture(b, s, "m1")
			sg := newSigner()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				s.DB().Exec("UPDATE machines SET generation = generation + 1")
				b.StartTimer()
				got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl", sg)
				if err != nil || len(fails) > 0 || len(got[m.ID].Batch) < 569*50 {
					b.Fatal(err, fails)
				}
			}
		})
	}
}

// BenchmarkReadForCompose_500: the snapshot read of a 500-machine compose
// batch (machines, variables, assignments), by gorm's Find and by the
// direct scans composing uses, side by side in one run.
func BenchmarkReadForCompose_500(b *testing.B) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		s := storetest.MustOpen(b, d)
		ctx := context.Background()
		ids := batchFleet(b, s, 500, "")
		// gorm's Find, the direct scans with the ids a parameter each
		// (gorm's list), and the direct scans with the ids one parameter.
		for _, way := range []string{"gorm", "scan-list", "scan"} {
			b.Run(d+"/"+way, func(b *testing.B) {
				store.SetIDsAsList(way == "scan-list")
				defer store.SetIDsAsList(false)
				b.ReportAllocs()
				for range b.N {
					if n, err := s.ReadForCompose(ctx, ids, way == "gorm"); err != nil || n != 1500 {
						b.Fatal(n, err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/500, "µs/machine")
			})
		}
	}
}

// batchFleet is n machines at generation 1, each with the module "mod"
// assigned and the variable port; with a manifest, "mod" has a build of it.
// It returns the machines' ids.
func batchFleet(b *testing.B, s *store.Store, n int, manifest string) []int64 {
	b.Helper()
	ctx := context.Background()
	if err := s.CreateModule(ctx, "t", &models.Module{Name: "mod", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
		b.Fatal(err)
	}
	if manifest != "" {
		if err := s.CreateBuild(ctx, "t", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
			b.Fatal(err)
		}
	}
	mod, _ := s.Module(ctx, "mod")
	now := time.Now().UTC()
	ms := make([]models.Machine, n)
	for i := range ms {
		ms[i] = models.Machine{Name: fmt.Sprintf("m%03d", i), Generation: 1, GenerationAt: now, Running: "{}", CreatedAt: now}
	}
	if err := s.DB().CreateInBatches(&ms, 50).Error; err != nil {
		b.Fatal(err)
	}
	ids := make([]int64, len(ms))
	as := make([]models.Assignment, len(ms))
	vs := make([]models.MachineVariable, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
		as[i] = models.Assignment{MachineID: m.ID, ModuleID: mod.ID, CreatedAt: now}
		vs[i] = models.MachineVariable{MachineID: m.ID, Key: "port", Value: "9000"}
	}
	if err := s.DB().CreateInBatches(&as, 50).Error; err != nil {
		b.Fatal(err)
	}
	if err := s.DB().CreateInBatches(&vs, 50).Error; err != nil {
		b.Fatal(err)
	}
	return ids
}
