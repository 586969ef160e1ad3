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
// of a fan-out, with the fan-out benchmark's manifest of one resource.
func BenchmarkCompose_Batch500(b *testing.B) { composeBatch500(b, manifest) }

// BenchmarkCompose_Batch500_40Resources: the same with a service's
// manifest of 40 resources, most of them the same on every machine.
func BenchmarkCompose_Batch500_40Resources(b *testing.B) { composeBatch500(b, manifest40) }

func composeBatch500(b *testing.B, manifest string) {
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

// manifest40 is a service's manifest of 40 resources: 30 configuration
// files and 4 services the same on every machine, 4 files and 2 services
// that name the machine or its port.
var manifest40 = func() string {
	var res []string
	for i := range 30 {
		res = append(res, fmt.Sprintf(`{"name": "conf%02d", "kind": "file", "path": "/etc/svc/conf%02d.toml", "mode": "0644", "content": %q}`,
			i, i, strings.Repeat(fmt.Sprintf("key_%02d = \"a value of some length\" # <default>\n", i), 6)))
	}
	for i := range 4 {
		res = append(res, fmt.Sprintf(`{"name": "unit%d", "kind": "service", "command": ["/usr/bin/svc%d", "--config", "/etc/svc/conf%02d.toml", "--log-level", "info"], "env": {"LANG": "C.UTF-8", "SVC_HOME": "/var/lib/svc%d"}, "check": {"tcp": "127.0.0.1:80%02d"}, "after": ["conf%02d"]}`,
			i, i, i, i, i, i))
	}
	for i := range 4 {
		res = append(res, fmt.Sprintf(`{"name": "host%d", "kind": "file", "path": "/etc/svc/host%d.conf", "content": "name = ${machine.name}\nport = ${var.port}\n"}`, i, i))
	}
	for i := range 2 {
		res = append(res, fmt.Sprintf(`{"name": "agent%d", "kind": "service", "command": ["/usr/bin/agent%d", "--name", "${machine.name}", "--port", "${var.port}"], "env": {"AGENT_NAME": "${machine.name}"}, "check": {"tcp": "127.0.0.1:${var.port}"}}`, i, i))
	}
	return `{"resources": [` + strings.Join(res, ",") + `]}`
}()
