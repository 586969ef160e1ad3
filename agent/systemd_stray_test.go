package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// systemdAgentOver is agentOver with services as systemd units, run by a
// stand-in systemctl that records its calls (no systemd runs here).
func systemdAgentOver(tb testing.TB, state, rootDir, stand string) *Agent {
	tb.Helper()
	root, err := openMachineRoot(rootDir)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := LoadState(state)
	if err != nil {
		tb.Fatal(err)
	}
	s := newSystemd(root)
	s.systemctl = stand
	s.owedFile = filepath.Join(state, "units-owed.json")
	cfg := Config{StateDir: state, Root: rootDir, Services: "systemd", Systemctl: stand}
	cfg.defaults()
	return &Agent{cfg: cfg, client: newClient(&Identity{Controllers: []string{"http://127.0.0.1:1"}}), root: root,
		services: s, state: st}
}

// TestApplySystemd_AUnitStartedByAnApplyCutShortIsStoppedWhenNoLongerNamed:
// the same crash as
// TestApply_AServiceStartedByAnApplyCutShortIsStoppedWhenNoLongerNamed, on a
// host run with --services systemd. Generation 2 writes, enables and starts
// mesh-web-service.service; the host is killed before state.json records it.
// Generation 3 no longer names web.service. Under the host's own supervisor
// the pidfile made the next apply stop it; under systemd nothing did: the
// unit stayed enabled and running (started again at every boot), and
// nothing on the record said so. The units the host wrote are known by
// their header.
func TestApplySystemd_AUnitStartedByAnApplyCutShortIsStoppedWhenNoLongerNamed(t *testing.T) {
	state, rootDir := t.TempDir(), t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	stand := filepath.Join(t.TempDir(), "systemctl")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\necho \"$*\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conf := "v=1\n"
	base := models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &conf}

	first := systemdAgentOver(t, state, rootDir, stand)
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
	unit := filepath.Join(rootDir, "etc/systemd/system", UnitName("web.service"))
	if !exists(unit) {
		t.Fatal("generation 2 wrote no unit")
	}
	_ = os.Remove(calls)

	// The host starts again; the controller's latest names only app.conf.
	next := systemdAgentOver(t, state, rootDir, stand)
	next.adopt(ctx)
	st = next.state.clone()
	acts, err := next.applyInFull(ctx, &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 3, Resources: []models.Resource{base}}, st)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(calls)
	if !strings.Contains(string(got), "disable --now "+UnitName("web.service")) || exists(unit) {
		t.Fatalf("web.service, enabled and started by generation 2 of this host, is neither stopped nor disabled after generation 3 dropped it "+
			"(unit file left: %v; systemctl calls: %q; actions %+v)", exists(unit), got, acts)
	}
}
