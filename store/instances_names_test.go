package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestAdvertisedNames_AnInstanceLongGoneFreesItsNames: every start writes
// an instance row of its own, never removed, so a name a controller was
// once advertised under, then renamed away from, was refused to hosts'
// service certificates for good. An instance not heard from within
// AdvertisedNamesKept no longer counts; one heard from lately does,
// stopped or not.
func TestAdvertisedNames_AnInstanceLongGoneFreesItsNames(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for id, names := range map[string]string{"ctl-old": `["ctl-old.mesh.example"]`, "ctl-stopped": `["ctl-b.mesh.example"]`, "ctl-up": `["ctl.mesh.example"]`} {
			if err := s.RegisterInstance(ctx, &models.Instance{ID: id, State: models.InstanceServing, Advertise: names}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SetInstanceState(ctx, "ctl-stopped", models.InstanceStopped); err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Model(&models.Instance{}).Where("id = ?", "ctl-old").
			Update("heartbeat_at", s.Now().Add(-store.AdvertisedNamesKept-time.Hour)).Error; err != nil {
			t.Fatal(err)
		}
		names, err := s.AdvertisedNames(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"ctl-b.mesh.example", "ctl.mesh.example"}) {
			t.Fatalf("advertised names %v", names)
		}
	})
}
