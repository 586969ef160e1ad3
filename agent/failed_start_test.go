package agent

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"mesh/models"
)

// TestApply_AServiceWhoseNewVersionFailsToStartIsNotSaidToRun: generation
// 1 ran web.service under the host's own supervisor. Generation 2 changed
// its command to one that cannot start (a binary the build forgot). The
// supervisor stopped the running process, failed to start the new one, and
// generation 2 is rejected after its attempts — right. But from then on
// the host said web ran: the rejected report's running map named web's
// build, the state kept web.service as managed, and no check, in the
// report or in any checked report after it, failed for it (the supervisor
// forgot it, so nothing said it was down). Nothing ran. A managed service
// no process of which runs is a failing check of itself, as one that
// exited is.
func TestApply_AServiceWhoseNewVersionFailsToStartIsNotSaidToRun(t *testing.T) {
	srv := newReportServer(t)
	a := m1Host(t, srv)
	a.cfg.MaxAttempts = 1
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(a.root.dir, "opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.root.dir, "opt/run"), []byte("#!/bin/sh\nexec sleep 120\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env1, _ := signDecl(t, models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 1, Resources: []models.Resource{
		{ID: "web.service", Module: "web", Build: 1, Kind: "service", Command: []string{"/opt/run"}}}})
	a.handle(ctx, &pollResult{body: env1, send: "s1", etag: `"1"`})
	sup := a.services.(*supervisor)
	var rec pidRecord
	if err := readJSON(sup.pidPath("web.service"), &rec); err != nil || !alive(rec) {
		t.Fatalf("generation 1's service does not run: %+v %v", rec, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-rec.PID, syscall.SIGKILL) })

	env2, _ := signDecl(t, models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "web.service", Module: "web", Build: 2, Kind: "service", Command: []string{"/opt/missing"}}}})
	a.handle(ctx, &pollResult{body: env2, send: "s2", etag: `"2"`})
	rs := srv.reports()
	last := rs[len(rs)-1]
	if last.Outcome != models.OutcomeRejected {
		t.Fatalf("generation 2: %+v; want rejected", last)
	}
	if alive(rec) {
		t.Fatalf("generation 1's process still runs after its service was stopped for generation 2")
	}
	// What the check loop looks at next.
	targets, _, _, _, _ := a.snapshotChecks()
	checks := a.checkAll(ctx, targets, 0)
	failing := false
	for _, c := range checks {
		failing = failing || c.Resource == "web.service" && !c.OK
	}
	if _, says := last.Running["web"]; says && !failing {
		t.Fatalf("nothing of web.service runs (generation 1's process stopped, generation 2's never started), yet the rejected report "+
			"says web runs (%+v), the state keeps web.service, and the next look's checks %+v fail nothing for it", last.Running, checks)
	}
}
