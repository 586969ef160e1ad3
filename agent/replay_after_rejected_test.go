package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"mesh/models"
)

// TestReplay_AnAppliedGenerationAfterAPartlyAppliedNewerIsNotANoOp: a
// host applied generation 5 (a service runs). Generation 6 dropped the
// service and added a file; step 1 stopped the service, step 2 failed (a
// directory stood where the file goes) and generation 6 was rejected: the
// machine held part of generation 6, the service gone. A controller
// restored from a backup (or another instance with a stale view) then sent
// generation 5 again, byte for byte, and the host answered "applied:
// no-op: generation already applied" without touching the machine: the
// controller recorded generation 5 applied and current while the service
// it names was stopped. It is refused as older than the last finished.
func TestReplay_AnAppliedGenerationAfterAPartlyAppliedNewerIsNotANoOp(t *testing.T) {
	srv := newReportServer(t)
	a := m1Host(t, srv)
	fs := &fakeServices{}
	a.services = fs
	a.cfg.MaxAttempts = 1
	ctx := context.Background()
	conf := "x=1\n"
	svc := models.Resource{ID: "old.svc", Module: "old", Build: 1, Kind: "service", Command: []string{"/bin/true"}}
	five := models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 5, Resources: []models.Resource{
		{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &conf}, svc}}
	env5, _ := signDecl(t, five)
	a.handle(ctx, &pollResult{body: env5, send: "s5", etag: `"5"`})
	if a.state.Applied != 5 || a.state.Resources["old.svc"] == nil {
		t.Fatalf("generation 5 not applied: %+v", a.state)
	}

	// A person's directory where generation 6's new file goes.
	if err := os.MkdirAll(filepath.Join(a.root.dir, "etc/new.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	env6, _ := signDecl(t, models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 6, Resources: []models.Resource{
		{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/etc/app.conf", Content: &conf},
		{ID: "new.conf", Module: "new", Build: 1, Kind: "file", Path: "/etc/new.conf", Content: &conf}}})
	a.handle(ctx, &pollResult{body: env6, send: "s6", etag: `"6"`})
	if rs := srv.reports(); rs[len(rs)-1].Outcome != models.OutcomeRejected {
		t.Fatalf("generation 6: %+v; want rejected", rs[len(rs)-1])
	}
	if len(fs.stopped) != 1 || a.state.Resources["old.svc"] != nil {
		t.Fatalf("generation 6 did not stop old.svc before failing: stopped %v", fs.stopped)
	}

	// Generation 5 again, from a controller restored from a backup.
	a.handle(ctx, &pollResult{body: env5, send: "s5-replayed", etag: `"5"`})
	rs := srv.reports()
	last := rs[len(rs)-1]
	if last.Generation == 5 && last.Outcome != models.OutcomeRefused {
		t.Fatalf("generation 5 replayed after generation 6 stopped old.svc: reported %q (%q, %d action(s)), "+
			"yet old.svc, which generation 5 names, is stopped and not in the state", last.Outcome, last.Reason, len(last.Actions))
	}
}
