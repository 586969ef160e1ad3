package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// A service's unit rewritten by an apply whose daemon-reload then failed
// (a transient systemctl error) is owed its reload and restart: the retry
// of the same generation finds the unit file already as declared, says
// "unchanged" and only runs `systemctl start` — a no-op on the running
// unit — so systemd keeps running the old unit (old env, old config) and
// the new config file the service is `after` never reaches it.
func TestApplySystemd_AUnitWrittenByAnApplyWhoseReloadFailedIsReloadedAndRestartedOnRetry(t *testing.T) {
	state, rootDir := t.TempDir(), t.TempDir()
	calls := filepath.Join(t.TempDir(), "calls")
	failMark := filepath.Join(t.TempDir(), "fail-reload")
	stand := filepath.Join(t.TempDir(), "systemctl")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\n" +
		"if [ \"$1\" = daemon-reload ] && [ -e " + failMark + " ]; then echo 'Failed to reload daemon: Connection timed out' >&2; exit 1; fi\nexit 0\n"
	if err := os.WriteFile(stand, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	decl := func(gen int64, conf string) *models.DeclarationPayload {
		c := conf
		return &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: gen, Resources: []models.Resource{
			{ID: "web.conf", Module: "web", Build: 1, Kind: "file", Path: "/etc/web.conf", Content: &c},
			{ID: "web.service", Module: "web", Build: 1, Kind: "service", Command: []string{"/opt/run"}, After: []string{"web.conf"}, Env: map[string]string{"V": conf}},
		}}
	}
	a := systemdAgentOver(t, state, rootDir, stand)
	st := a.state.clone()
	if _, err := a.applyInFull(ctx, decl(1, "v1"), st); err != nil {
		t.Fatal(err)
	}
	a.state = st

	// Generation 2 changes the config: the unit is rewritten, the reload fails.
	if err := os.WriteFile(failMark, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st = a.state.clone()
	if _, err := a.applyInFull(ctx, decl(2, "v2"), st); err == nil {
		t.Fatal("the apply whose reload failed succeeded")
	}
	// systemctl answers again; the host retries generation 2.
	_ = os.Remove(failMark)
	_ = os.Remove(calls)
	st = a.state.clone()
	acts, err := a.applyInFull(ctx, decl(2, "v2"), st)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(calls)
	if !strings.Contains(string(got), "daemon-reload") || !strings.Contains(string(got), "restart "+UnitName("web.service")) {
		t.Fatalf("the retry neither reloaded systemd nor restarted web.service: it runs the unit and config of generation 1 "+
			"(systemctl calls: %q; actions %+v)", got, acts)
	}
}
