package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mesh/models"
)

// agentOver is testAgent over given state and root directories: the host
// started again on the same machine.
func agentOver(tb testing.TB, state, rootDir string) *Agent {
	tb.Helper()
	root, err := openMachineRoot(rootDir)
	if err != nil {
		tb.Fatal(err)
	}
	sup, err := newSupervisor(state, root, slog.New(slog.DiscardHandler), time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(sup.Close)
	st, err := LoadState(state)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{StateDir: state, Root: rootDir}
	cfg.defaults()
	return &Agent{cfg: cfg, client: newClient(&Identity{Controllers: []string{"http://127.0.0.1:1"}}), root: root,
		services: sup, state: st}
}

// TestApply_AServiceStartedByAnApplyCutShortIsStoppedWhenNoLongerNamed: the
// host was killed (power loss, OOM, SIGKILL) after an apply started a new
// service and before state.json recorded it — the window holds the apply's
// remaining steps and up to 15 s of checks. The service ran on (its own
// session, its pidfile under the state dir), and when the next declaration
// no longer named it, nothing ever stopped it. It is stopped now, as any
// service a declaration of this host started and the next one drops.
func TestApply_AServiceStartedByAnApplyCutShortIsStoppedWhenNoLongerNamed(t *testing.T) {
	state, rootDir := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootDir, "opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootDir, "opt/run"), []byte("#!/bin/sh\nexec sleep 120\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conf := "v=1\n"
	base := models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &conf}

	// Generation 1, applied and saved.
	first := agentOver(t, state, rootDir)
	st := first.state.clone()
	if _, err := first.applyInFull(ctx, &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 1, Resources: []models.Resource{base}}, st); err != nil {
		t.Fatal(err)
	}
	st.Applied, st.Finished = 1, 1
	first.state = st
	if err := first.state.Save(state); err != nil {
		t.Fatal(err)
	}

	// Generation 2 adds a service; the host dies before it saves state.
	st = first.state.clone()
	if _, err := first.applyInFull(ctx, &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{base,
		{ID: "web.service", Module: "web", Build: 1, Kind: "service", Command: []string{"/opt/run"}},
	}}, st); err != nil {
		t.Fatal(err)
	}
	sup := first.services.(*supervisor)
	var rec pidRecord
	if err := readJSON(sup.pidPath("web.service"), &rec); err != nil || !alive(rec) {
		t.Fatalf("the service did not start: %+v %v", rec, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-rec.PID, syscall.SIGKILL); _ = syscall.Kill(rec.PID, syscall.SIGKILL) })
	sup.Close() // killed: nothing more is written; the service runs on

	// The host starts again; the controller's latest (a rollback of the
	// web module, say) names only app.conf.
	next := agentOver(t, state, rootDir)
	next.adopt(ctx)
	st = next.state.clone()
	acts, err := next.applyInFull(ctx, &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 3, Resources: []models.Resource{base}}, st)
	if err != nil {
		t.Fatal(err)
	}
	next.state = st
	_ = next.state.Save(state)
	if alive(rec) {
		t.Fatalf("web.service (pid %d), started by generation 2 of this host, still runs after generation 3 dropped it; nothing will ever stop it (actions %+v, state %v)", rec.PID, acts, sortedIDs(next.state.Resources))
	}
	said := false
	for _, act := range acts {
		said = said || act.Resource == "web.service" && act.Action == "removed"
	}
	if !said {
		t.Fatalf("the apply stopped web.service and does not say so: %+v", acts)
	}
}
