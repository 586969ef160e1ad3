package store_test

import (
	"context"
	"encoding/json"
	"mesh/models"
	"mesh/store"
	"testing"
	"time"

	"github.com/google/uuid"
)

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// recordSend records a send of generation gen to machine id and returns
// its id.
func recordSend(t *testing.T, s *store.Store, id, gen int64) string {
	t.Helper()
	snd := models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: id, Generation: gen, InstanceID: "test", CreatedAt: time.Now().UTC()}
	if err := s.InsertSends(context.Background(), []models.Send{snd}); err != nil {
		t.Fatal(err)
	}
	return snd.ID
}

// trySentReport is sentReport that returns the store's answer.
func trySentReport(t *testing.T, s *store.Store, id int64, r *models.Report) error {
	t.Helper()
	r.Send = recordSend(t, s, id, r.Generation)
	_, err := s.InsertReport(context.Background(), id, r, []byte(`{}`))
	return err
}

// sentReport records a send of r's generation to machine id and stores r
// naming it: only a report tied to a send moves what a machine applied.
func sentReport(t *testing.T, s *store.Store, id int64, r *models.Report) {
	t.Helper()
	if err := trySentReport(t, s, id, r); err != nil {
		t.Fatal(err)
	}
}

// certModule creates the module "web" with a build of certManifest: a
// certificate resource and a tls check, content that needs schema 2.
func certModule(t *testing.T, s *store.Store) {
	t.Helper()
	ctx := context.Background()
	if err := s.CreateModule(ctx, "test", &models.Module{Name: "web", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBuild(ctx, "test", "web", &models.Build{Manifest: certManifest}, nil); err != nil {
		t.Fatal(err)
	}
}
