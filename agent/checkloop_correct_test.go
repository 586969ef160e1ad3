package agent

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"mesh/models"
)

// TestCheckLoop_CorrectsTheApplysWord: the check loop reported a check
// only when it differed from what the loop itself saw last, never from
// what the host last told the controller. An apply whose checks (within
// their settle) found the service still starting reported "failing"; the
// loop, which saw it passing before the apply and after, said nothing:
// the controller kept "failing", and the machine turned unhealthy and
// stayed so, its service healthy. The loop now reports what differs from
// the last report.
func TestCheckLoop_CorrectsTheApplysWord(t *testing.T) {
	a, srv := checkingAgent(t, time.Second)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	svc := models.Resource{ID: "mod.svc", Module: "mod", Build: 1, Kind: "service", Command: []string{"/bin/true"},
		Check: &models.Check{TCP: addr}}
	a.state.Applied, a.state.Finished, a.state.AppliedSend = 5, 5, "s5"
	a.state.Resources["mod.svc"] = &Managed{Kind: "service", Module: "mod", Build: 1, Digest: "sha256:a", Resource: &svc}
	if err := a.saveState(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); a.checkLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-loopDone }) // a look in flight writes in the state dir
	reports := srv.reports
	deadline := time.Now().Add(5 * time.Second)
	for len(reports()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if rs := reports(); len(rs) != 1 || rs[0].Outcome != models.OutcomeChecked || !rs[0].Checks[0].OK {
		t.Fatalf("first checked report: %+v", rs)
	}

	// Generation 6 restarts the service; it is not listening yet when the
	// apply's checks give up (checkAll's settle, shortened here), so the
	// applied report says failing — exactly what applyWithRetries sends.
	ln.Close()
	checks := checkAll(ctx, a.root, a.id.ca, []models.Resource{svc}, 0)
	if ln, err = net.Listen("tcp", addr); err != nil { // up again a moment later
		t.Fatal(err)
	}
	defer ln.Close()
	v := &verified{digest: "sha256:6", decl: models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 6, Resources: []models.Resource{svc}}}
	a.finish(ctx, "s6", v, models.OutcomeApplied, "", nil, 1, checks)

	// The loop's next looks find it passing: a checked report says so.
	applied := len(reports())
	deadline = time.Now().Add(10 * time.Second)
	var last models.CheckResult
	for time.Now().Before(deadline) {
		rs := reports()
		if len(rs) > applied && len(rs[len(rs)-1].Checks) > 0 {
			last = rs[len(rs)-1].Checks[0]
			if last.OK {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range reports() {
		t.Logf("report: %s generation %d send %s checks %+v", r.Outcome, r.Generation, r.Send, r.Checks)
	}
	if !last.OK {
		t.Fatalf("the service passes its check, but the host's last word to the controller is still %q (failing)", last.Detail)
	}
}

// checkingAgent is a host whose check loop reports to srv every
// checkEvery, as machine m1.
func checkingAgent(t *testing.T, checkEvery time.Duration) (*Agent, *reportServer) {
	t.Helper()
	srv := newReportServer(t)
	a := testAgent(t)
	a.cfg.CheckEvery = checkEvery
	a.id = &Identity{Machine: "m1"}
	a.logs = &logShipper{}
	a.client = newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
	a.checkedClient = a.client.sibling()
	a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
	a.checkedOut = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox-checked"), stateDir: a.cfg.StateDir}
	return a, srv
}

// reports are the reports the server has taken so far.
func (s *reportServer) reports() []models.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]models.Report(nil), s.got...)
}
