package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// Generation 2 adds web.service: its unit is written, daemon-reload fails.
// The host process restarts (a crash, a host release's rollout, an
// operator's restart of mesh-host) before the retry. What is owed lives
// only in memory, and adopt knows only the services state.json records
// (web.service is not one): the retry finds the unit file as declared,
// says "unchanged", and runs only `systemctl start` — the unit is never
// enabled (gone at the next boot) and never reloaded.
func TestSystemd_OwedUnitOfANewServiceSurvivesAHostRestart(t *testing.T) {
	state, rootDir := t.TempDir(), t.TempDir()
	tmp := t.TempDir()
	calls := filepath.Join(tmp, "calls")
	failMark := filepath.Join(tmp, "fail-reload")
	stand := filepath.Join(tmp, "systemctl")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\n" +
		"if [ \"$1\" = daemon-reload ] && [ -e " + failMark + " ]; then echo 'Failed to reload daemon: Connection timed out' >&2; exit 1; fi\nexit 0\n"
	if err := os.WriteFile(stand, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conf := "v=1\n"
	base := models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &conf}
	web := models.Resource{ID: "web.service", Module: "web", Build: 1, Kind: "service", Command: []string{"/opt/run"}}
	a := systemdAgentOver(t, state, rootDir, stand)
	st := a.state.clone()
	if _, err := a.applyInFull(ctx, &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 1, Resources: []models.Resource{base}}, st); err != nil {
		t.Fatal(err)
	}
	a.state = st
	if err := a.state.Save(state); err != nil {
		t.Fatal(err)
	}

	gen2 := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{base, web}}
	if err := os.WriteFile(failMark, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st = a.state.clone()
	if _, err := a.applyInFull(ctx, gen2, st); err == nil {
		t.Fatal("the apply whose reload failed succeeded")
	}
	_ = os.Remove(failMark)

	// The host restarts: a new Agent over the same state dir and root.
	b := systemdAgentOver(t, state, rootDir, stand)
	b.adopt(ctx)
	_ = os.Remove(calls)
	st = b.state.clone()
	acts, err := b.applyInFull(ctx, gen2, st)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(calls)
	if !strings.Contains(string(got), "enable "+UnitName("web.service")) {
		t.Fatalf("the retry after a host restart never enabled web.service (it will not start at boot) nor reloaded systemd: "+
			"systemctl calls %q; actions %+v", got, acts)
	}
}
