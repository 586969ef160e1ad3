package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// TestRestore_ARetryingHostIsInConflict: a host applied a generation the
// store later lost (restored from a backup taken before it), and is
// retrying a failing generation of that lost timeline when the restored
// store, moved past it, answers. Its poll between attempts named no send,
// so the restored store never asked whether it made what the host holds:
// it sent its own newer generation, the host applied it in full (tearing
// down the lost timeline's /etc/extra), and the machine read current with
// no conflict on the record. The poll now names the failing generation's
// send, which the restored store never made: a conflict, nothing sent.
// The host reaches the controllers through a front (a load balancer's
// place) that is switched to the restored one once it is past the host.
func TestRestore_ARetryingHostIsInConflict(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc := storetest.Config(t, store.SQLite)
	c1 := ctltest.StartWith(t, sc)

	// A switchable front: the host knows one URL, as behind a load balancer.
	var target atomic.Pointer[url.URL]
	set := func(raw string) { u, _ := url.Parse(raw); target.Store(u) }
	set(c1.URL)
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target.Load()) },
	})
	defer front.Close()

	put := func(e *ctltest.Env, path string, body any) int64 {
		t.Helper()
		var m struct{ Generation int64 }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		resp := e.JSON(ctltest.Request{Method: "PUT", Path: path, Token: e.Admin,
			Header: map[string]string{"If-Match": fmt.Sprintf(`"%d"`, m.Generation)}, Body: body}, 200, nil)
		n, _ := strconv.ParseInt(strings.Trim(resp.Header.Get("ETag"), `"`), 10, 64)
		return n
	}
	assign := func(e *ctltest.Env, mods ...string) int64 {
		as := []map[string]any{}
		for _, m := range mods {
			as = append(as, map[string]any{"module": m})
		}
		return put(e, "/api/v1/machines/m1/assignments", map[string]any{"assignments": as})
	}
	type mview struct {
		State             string `json:"state"`
		Generation        int64  `json:"generation"`
		AppliedGeneration int64  `json:"applied_generation"`
	}
	machine := func(e *ctltest.Env) mview {
		var m mview
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		return m
	}

	for _, mod := range []struct{ name, manifest string }{
		{"conf", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/conf", "content": "x=${var.x}\n"}]}`},
		{"extra", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/extra", "content": "lost timeline\n"}]}`},
		{"broken", `{"resources": [{"name": "svc", "kind": "service", "command": ["/opt/missing/bin/run"]}]}`},
	} {
		c1.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: c1.Admin, Body: map[string]any{"name": mod.name}}, 201, nil)
		if resp, b := c1.Upload(c1.Admin, mod.name, mod.manifest, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload %s: %d %s", mod.name, resp.StatusCode, b)
		}
	}

	stateDir, root := filepath.Join(t.TempDir(), "state"), t.TempDir()
	if _, err := agent.Enroll(ctx, agent.Enrolment{Controllers: []string{front.URL}, JoinToken: c1.JoinToken(), Name: "m1", StateDir: stateDir}); err != nil {
		t.Fatal(err)
	}
	put(c1, "/api/v1/machines/m1/variables", map[string]any{"variables": map[string]string{"x": "1"}})
	assign(c1, "conf")
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Config{StateDir: stateDir, Root: root, Wait: 2 * time.Second,
			RetryBase: 2 * time.Second, MaxAttempts: 20, StopGrace: time.Second,
			Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	}()
	defer func() { cancel(); <-done }()
	testwait.For(t, 30*time.Second, "conf applied", func() bool { m := machine(c1); return m.AppliedGeneration == m.Generation })

	// The backup: m1 with conf alone.
	backup := filepath.Join(t.TempDir(), "backup.db")
	if err := c1.Ctl.Store.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	// The timeline the restore will lose: extra applied, then broken failing.
	assign(c1, "conf", "extra")
	testwait.For(t, 30*time.Second, "extra applied", func() bool { m := machine(c1); return m.AppliedGeneration == m.Generation })
	extra := filepath.Join(root, "etc", "extra")
	if _, err := os.Stat(extra); err != nil {
		t.Fatalf("the lost timeline's file: %v", err)
	}
	bad := assign(c1, "conf", "extra", "broken")
	var reports struct {
		Items []struct {
			Outcome    string `json:"outcome"`
			Generation int64  `json:"generation"`
		} `json:"items"`
	}
	testwait.For(t, 30*time.Second, "the broken generation failing", func() bool {
		c1.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/reports", Token: c1.Admin}, 200, &reports)
		for _, r := range reports.Items {
			if r.Outcome == "failed" && r.Generation == bad {
				return true
			}
		}
		return false
	})
	admin := c1.Admin
	c1.Stop()

	// Restored from the backup (as `mesh-controller restore` does), and
	// moved past the host's generation.
	if _, err := store.Restore(ctx, sc.DataDir, backup, time.Now()); err != nil {
		t.Fatal(err)
	}
	c2 := ctltest.StartWith(t, sc)
	c2.Admin = admin
	for i := 2; machine(c2).Generation <= bad; i++ {
		put(c2, "/api/v1/machines/m1/variables", map[string]any{"variables": map[string]string{"x": strconv.Itoa(i)}})
	}
	set(c2.URL)

	// The host has /etc/extra from a timeline the restored store lost: the
	// promise is a conflict, on the record, and nothing applied over it.
	var m mview
	testwait.For(t, 60*time.Second, "the restored store's answer to the retrying host", func() bool {
		m = machine(c2)
		return m.State == "conflict" || m.AppliedGeneration > bad
	})
	_, statErr := os.Stat(extra)
	if m.State != "conflict" || statErr != nil {
		t.Fatalf("the host applied generation %d of the restored store over the lost timeline's content (/etc/extra: %v); "+
			"the machine shows %q at generation %d (applied %d), no conflict", m.AppliedGeneration, statErr, m.State, m.Generation, m.AppliedGeneration)
	}
}
