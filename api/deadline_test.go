package api_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
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

// TestStoreGone_AnswerNamesNoAddress: with PostgreSQL unreachable, a
// request (an anonymous login here) is answered 503 saying the store is
// unavailable and why — without the driver's words, which named the
// database, its user and its address to anyone who asked.
func TestStoreGone_AnswerNamesNoAddress(t *testing.T) {
	cfg := storetest.Config(t, store.Postgres)
	u, err := url.Parse(cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	// The controller reaches PostgreSQL through a relay this test closes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	target := u.Host
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			db, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, db)
			mu.Unlock()
			go func() { _, _ = io.Copy(db, c); db.Close() }()
			go func() { _, _ = io.Copy(c, db); c.Close() }()
		}
	}()
	relay := ln.Addr().String()
	u.Host = relay
	cfg.DatabaseURL = u.String()
	e := ctltest.StartWith(t, cfg, ctltest.Options{StoreTimeout: 2 * time.Second})
	e.AddUser("carol", "operator")
	ln.Close()
	mu.Lock()
	for _, c := range open {
		c.Close()
	}
	mu.Unlock()
	// The first requests find the pool's connections closed; those after
	// find no PostgreSQL to connect to.
	_, port, _ := net.SplitHostPort(relay)
	for range 3 {
		resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login",
			Body: map[string]string{"username": "carol", "password": "password-of-carol"}})
		if resp.StatusCode != 503 || !strings.Contains(string(body), "unavailable") {
			t.Fatalf("with the store gone: %d %s", resp.StatusCode, body)
		}
		for _, secret := range []string{"user=", "database=", port, "postgres"} {
			if strings.Contains(string(body), secret) {
				t.Fatalf("the answer gives away %q: %s", secret, body)
			}
		}
	}
}
