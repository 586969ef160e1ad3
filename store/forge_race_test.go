package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestDeliver_AMergeWhileAnotherInstanceUploads: two controller instances
// on one PostgreSQL. On instance A a person uploads a build of module mod
// (its transaction takes the module's row and numbers the build 1); at the
// same moment instance B takes a signed push to mod's repository. The
// delivery numbers its queued build from the builds it sees — also 1 —
// and failed on the uniqueness of (module, number) once the upload
// committed: it was answered with an error, and neither the delivery, nor
// its merge, nor any refusal was on the record (a forge does not send it
// again). The merge's build is numbered under the module's lock now.
func TestDeliver_AMergeWhileAnotherInstanceUploads(t *testing.T) {
	cfg := storetest.Config(t, store.Postgres)
	a := storetest.MustOpenConfig(t, cfg)
	b, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := a.CreateModule(ctx, "test", &models.Module{Name: "mod", Kind: "service", Repository: "o/app", SourcePaths: "[]", Tiers: "[]"}); err != nil {
		t.Fatal(err)
	}
	src := &models.Source{Name: "app", Kind: models.ForgeGitea, Repository: "o/app", DefaultBranch: "main", Secret: "a-secret-of-some-length"}
	if err := a.CreateSource(ctx, "test", src); err != nil {
		t.Fatal(err)
	}

	started, release, uploaded := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		uploaded <- a.Write(ctx, func(tx *store.Tx) error {
			if _, err := tx.CreateBuild("user:olga", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
				return err
			}
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	delivered := make(chan error, 1)
	go func() {
		out, err := b.Deliver(ctx, src, "delivery-7", "push", &models.Push{Ref: "refs/heads/main", Commit: strings.Repeat("ab", 20),
			Repository: "o/app", Author: "ana"}, "")
		if err == nil {
			t.Logf("delivered: %+v", out)
		}
		delivered <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var w int
		a.DB().Raw("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").Scan(&w)
		if w >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delivery never waited")
		}
	}
	close(release)
	if err := <-uploaded; err != nil {
		t.Fatal(err)
	}
	derr := <-delivered
	var deliveries, merges int64
	a.DB().Model(&models.Delivery{}).Where("delivery_id = ?", "delivery-7").Count(&deliveries)
	a.DB().Model(&models.Merge{}).Count(&merges)
	evs, _ := a.AuditEvents(ctx, 200, 0)
	onRecord := false
	for _, e := range evs {
		onRecord = onRecord || strings.Contains(e.Target, "source/app") && e.Action != "create-source"
	}
	if derr != nil || deliveries != 1 || merges != 1 {
		t.Fatalf("a signed push delivered while a build was uploaded: error %v; delivery rows %d, merges %d, on the audit record %v", derr, deliveries, merges, onRecord)
	}
}
