package store_test

import (
	"context"
	"io/fs"
	"sync"
	"testing"

	"github.com/pressly/goose/v3"

	"mesh/migrations"
	"mesh/store"
	"mesh/store/storetest"
)

// TestMigrate_TwoInstancesAtOnce: a store one migration behind (an
// upgrade), and two controller replicas of the new build started together
// on it (a rolling upgrade with two replicas) both migrate it at start
// (controller.OpenStore → store.Migrate). Both must start, and each
// migration must be applied once.
func TestMigrate_TwoInstancesAtOnce(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) { migrateTwoAtOnce(t, d) })
	}
}

func migrateTwoAtOnce(t *testing.T, dialect string) {
	ctx := context.Background()
	cfg := storetest.Config(t, dialect)
	var stores [2]*store.Store
	for i := range stores {
		s, err := store.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	// The store as the previous build left it: every migration but the last.
	sqlDB, _ := stores[0].DB().DB()
	sub, _ := fs.Sub(migrations.FS, dialect)
	d := goose.DialectPostgres
	if dialect == store.SQLite {
		d = goose.DialectSQLite3
	}
	p, err := goose.NewProvider(d, sqlDB, sub)
	if err != nil {
		t.Fatal(err)
	}
	srcs := p.ListSources()
	if _, err := p.UpTo(ctx, srcs[len(srcs)-2].Version); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range stores {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = s.Migrate(ctx) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d did not start: %v", i, err)
		}
	}
	var dup []int64
	stores[0].DB().Raw(`SELECT version_id FROM goose_db_version GROUP BY version_id HAVING count(*) > 1`).Scan(&dup)
	if len(dup) > 0 {
		t.Errorf("migrations applied twice: %v", dup)
	}
}

// TestPostgres_KeepalivesFindADeadController: every session of the store
// has TCP keepalives of about a minute, so the backends of a controller
// whose machine died without a word (no FIN) end, and let go of their
// locks — the migration's advisory lock among them, which others wait on —
// within that, not the kernel's two hours.
func TestPostgres_KeepalivesFindADeadController(t *testing.T) {
	s := storetest.MustOpen(t, store.Postgres)
	var idle, count string
	if err := s.DB().Raw("SHOW tcp_keepalives_idle").Scan(&idle).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Raw("SHOW tcp_keepalives_count").Scan(&count).Error; err != nil {
		t.Fatal(err)
	}
	if idle != "30" || count != "3" {
		t.Fatalf("tcp_keepalives_idle %q, count %q; want 30 and 3", idle, count)
	}
}
