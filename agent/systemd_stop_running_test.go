package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"mesh/models"
)

// A person (or a clean-up script) removed the unit file of a service that
// is still running, without stopping it. systemd keeps the unit loaded and
// active ("Loaded: not-found, Active: active (running)", systemd#4995);
// `systemctl disable --now` refuses ("Unit file … does not exist", exit 1)
// and, failing at the disable, never stops it. Stop now takes any error
// with the file absent for "already gone": the service is dropped from the
// host's state while its process keeps running, and no later apply (nor
// Strays, which reads unit files) ever stops it.
func TestSystemd_StopOfAUnitWhoseFileWasRemovedButStillRunsStopsIt(t *testing.T) {
	state, rootDir := t.TempDir(), t.TempDir()
	tmp := t.TempDir()
	calls := filepath.Join(tmp, "calls")
	active := filepath.Join(tmp, "active")
	stand := filepath.Join(tmp, "systemctl")
	unitDir := filepath.Join(rootDir, "etc/systemd/system")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\n" +
		// restart/start make the unit active
		"if [ \"$1\" = restart ] || [ \"$1\" = start ]; then touch " + active + "; exit 0; fi\n" +
		// disable of a unit with no file fails before --now stops anything
		"if [ \"$1\" = disable ]; then u=\"$2\"; [ \"$2\" = --now ] && u=\"$3\"; " +
		"if [ ! -e " + unitDir + "/\"$u\" ]; then echo \"Failed to disable unit: Unit file $u does not exist.\" >&2; exit 1; fi; " +
		"[ \"$2\" = --now ] && rm -f " + active + "; exit 0; fi\n" +
		"if [ \"$1\" = stop ] || [ \"$1\" = kill ]; then rm -f " + active + "; exit 0; fi\n" +
		"exit 0\n"
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
	if _, err := os.Stat(active); err != nil {
		t.Fatal("web.service not started by generation 1")
	}
	// The unit file is removed; the unit keeps running.
	if err := os.Remove(filepath.Join(unitDir, UnitName("web.service"))); err != nil {
		t.Fatal(err)
	}
	st = a.state.clone()
	_, err := a.applyInFull(ctx, &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{base}}, st)
	got, _ := os.ReadFile(calls)
	if _, serr := os.Stat(active); serr == nil {
		t.Fatalf("generation 2 dropped web.service (apply error: %v) but its unit still runs: nothing stopped it\n(systemctl calls: %q)", err, got)
	}
}
