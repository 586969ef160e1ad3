package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"mesh/models"
)

// A service dropped from the declaration is stopped with `systemctl
// disable --now UNIT`. A person had already stopped, disabled and removed
// its unit (systemctl disable --now; rm; daemon-reload). systemd then
// answers the host's `disable --now` as it answers a stop of a unit that
// is inactive and has no file ("Failed to stop U: Unit U not loaded.",
// exit 5; modelled by the stand-in): the host fails every apply from then
// on, every later generation too, for a service that is already gone.
func TestApplySystemd_AServiceWhoseUnitAPersonAlreadyRemovedIsStillDropped(t *testing.T) {
	state, rootDir := t.TempDir(), t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	stand := filepath.Join(t.TempDir(), "systemctl")
	unitDir := filepath.Join(rootDir, "etc/systemd/system")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\n" +
		"if [ \"$1\" = disable ] && [ \"$2\" = --now ] && [ ! -e " + unitDir + "/\"$3\" ]; then echo \"Failed to stop $3: Unit $3 not loaded.\" >&2; exit 5; fi\nexit 0\n"
	if err := os.WriteFile(stand, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conf := "v=1\n"
	base := models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &conf}
	a := systemdAgentOver(t, state, rootDir, stand)
	st := a.state.clone()
	if _, err := a.applyInFull(ctx, &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 1, Resources: []models.Resource{base,
		{ID: "web.service", Module: "web", Build: 1, Kind: "service", Command: []string{"/opt/run"}}}}, st); err != nil {
		t.Fatal(err)
	}
	a.state = st

	// A person stops, disables and removes the unit.
	if err := os.Remove(filepath.Join(unitDir, UnitName("web.service"))); err != nil {
		t.Fatal(err)
	}
	// Generations 2 and 3 no longer name web.service.
	for gen := int64(2); gen <= 3; gen++ {
		st = a.state.clone()
		if _, err := a.applyInFull(ctx, &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: gen, Resources: []models.Resource{base}}, st); err != nil {
			got, _ := os.ReadFile(calls)
			t.Fatalf("generation %d fails for web.service, already stopped and removed by a person: %v\n(systemctl calls: %q)", gen, err, got)
		}
		a.state = st
	}
}
