package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
)

// TestStoreHangs_FailsFast: a store that does not answer (here a lock
// held on the machines table) used to make requests hang with no
// timeout. They answer 503 within the store timeout, saying why.
func TestStoreHangs_FailsFast(t *testing.T) {
	cfg := storetest.Config(t, store.Postgres)
	e := ctltest.StartWith(t, cfg, ctltest.Options{StoreTimeout: time.Second})
	e.Enroll("m1")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE machines IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, body := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: e.Admin})
	if took := time.Since(start); resp.StatusCode != 503 || took > 10*time.Second || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("with the store hanging: %d after %v (Retry-After %q): %s", resp.StatusCode, took, resp.Header.Get("Retry-After"), body)
	}
	if !strings.Contains(string(body), "unavailable") && !strings.Contains(string(body), "Store") {
		t.Fatalf("the 503 does not say the store is unavailable: %s", body)
	}
	_ = tx.Rollback(ctx)
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: e.Admin}, 200, nil)
}
