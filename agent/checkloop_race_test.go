package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"mesh/models"
	"mesh/testwait"
)

// TestCheckLoop_LookRacingAnApply: a look of the check loop in flight
// while an apply finishes reported its (older) look under the old
// generation's send, which the controller ignores (checked reports count
// only for the applied generation), and took it as told, so the applied
// report's "failing" was never corrected. A look an apply overtook is
// dropped, and what was told is kept per generation.
func TestCheckLoop_LookRacingAnApply(t *testing.T) {
	a, srv := checkingAgent(t, 300*time.Millisecond)

	var mu sync.Mutex
	block := false
	inLook := make(chan struct{}, 1)
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := block
		block = false
		mu.Unlock()
		if b {
			inLook <- struct{}{}
			<-release
		}
		w.WriteHeader(200)
	}))
	defer hs.Close()
	svc := models.Resource{ID: "mod.svc", Module: "mod", Build: 1, Kind: "service", Command: []string{"/bin/true"},
		Check: &models.Check{HTTP: hs.URL}}
	a.state.Applied, a.state.Finished, a.state.AppliedSend = 5, 5, "s5"
	a.state.Resources["mod.svc"] = &Managed{Kind: "service", Module: "mod", Build: 1, Digest: "sha256:a", Resource: &svc}
	if err := a.saveState(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := srv.reports
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); a.checkLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-loopDone }) // a look in flight writes in the state dir
	testwait.For(t, 5*time.Second, "generation 5's first look reported", func() bool { return len(reports()) > 0 })
	// The loop's next look is in flight (generation 5's snapshot) ...
	mu.Lock()
	block = true
	mu.Unlock()
	<-inLook
	// ... when generation 6's apply finishes, its checks catching the
	// service still starting.
	v := &verified{digest: "sha256:6", decl: models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 6, Resources: []models.Resource{svc}}}
	a.finish(ctx, "s6", v, models.OutcomeApplied, "", nil, 1,
		[]models.CheckResult{{Resource: "mod.svc", OK: false, At: time.Now().UTC(), Detail: "connection refused"}})
	close(release)
	// What the controller holds for generation 6, once the loop's looks
	// (the service passing throughout) say otherwise, or 10 s.
	told := func() string {
		t := "failing"
		for _, r := range reports() {
			if r.Generation == 6 && len(r.Checks) == 1 {
				t = map[bool]string{true: "passing", false: "failing"}[r.Checks[0].OK]
			}
		}
		return t
	}
	testwait.Until(10*time.Second, func() bool { return told() == "passing" })
	for _, r := range reports() {
		t.Logf("report: %s generation %d send %s checks %+v", r.Outcome, r.Generation, r.Send, r.Checks)
	}
	if told := told(); told != "passing" {
		t.Fatalf("the service passes every look, but the controller's word for generation 6 (the applied one) is still %s", told)
	}
}

// lookedAt is a service whose check the test holds: generation 5 runs it
// and has reported it passing; hold makes the next look hang, failing, so
// an apply can begin (and end) while it is in flight.
type lookedAt struct {
	a       *Agent
	srv     *reportServer
	svc     models.Resource
	ctx     context.Context
	mu      sync.Mutex
	block   bool
	failing bool
	hits    int
	inLook  chan struct{}
	release chan struct{}
}

func newLookedAt(t *testing.T) *lookedAt {
	t.Helper()
	l := &lookedAt{inLook: make(chan struct{}, 1), release: make(chan struct{})}
	l.a, l.srv = checkingAgent(t, 100*time.Millisecond)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		b, f := l.block, l.failing
		l.block = false
		l.hits++
		l.mu.Unlock()
		if b {
			l.inLook <- struct{}{}
			<-l.release
		}
		if f {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hs.Close)
	l.svc = models.Resource{ID: "mod.svc", Module: "mod", Build: 1, Kind: "service", Command: []string{"/bin/true"},
		Check: &models.Check{HTTP: hs.URL}}
	a := l.a
	a.state.Applied, a.state.Finished, a.state.AppliedSend = 5, 5, "s5"
	a.state.Resources["mod.svc"] = &Managed{Kind: "service", Module: "mod", Build: 1, Digest: "sha256:a", Resource: &l.svc}
	if err := a.saveState(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l.ctx = ctx
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); a.checkLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-loopDone }) // a look in flight writes in the state dir
	testwait.For(t, 5*time.Second, "generation 5's passing look reported", func() bool { return len(l.srv.reports()) > 0 })
	return l
}

// hold makes the next look hang with the service failing, and returns
// once it is in flight.
func (l *lookedAt) hold() {
	l.mu.Lock()
	l.block, l.failing = true, true
	l.mu.Unlock()
	<-l.inLook
}

// let lets the held look end and the service pass again; it returns the
// looks made so far.
func (l *lookedAt) let() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing = false
	close(l.release)
	return l.hits
}

// waitLooks waits until more than n looks were made.
func (l *lookedAt) waitLooks(t *testing.T, n int) {
	t.Helper()
	testwait.For(t, 5*time.Second, "a look after the apply", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.hits > n
	})
}

// noFailureReported fails the test if any report says the service failed.
func (l *lookedAt) noFailureReported(t *testing.T) {
	t.Helper()
	for _, r := range l.srv.reports() {
		for _, c := range r.Checks {
			if !c.OK {
				t.Fatalf("a look made while generation 6 was applied was reported: %s generation %d %+v", r.Outcome, r.Generation, r.Checks)
			}
		}
	}
}

// TestCheckLoop_NoWordMidApply: checks run between applies only. A look
// in flight when an apply begins — the service it looks at being replaced
// by the next generation's — is not reported under the applied generation
// (it blamed generation 5 for generation 6's service), and no look runs
// while the apply does.
func TestCheckLoop_NoWordMidApply(t *testing.T) {
	l := newLookedAt(t)
	l.hold()
	l.a.setApplying(true)
	// The apply ends (its own report carries its checks); looks go on.
	during := l.let()
	v := &verified{digest: "sha256:6", decl: models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 6, Resources: []models.Resource{l.svc}}}
	l.a.finish(l.ctx, "s6", v, models.OutcomeApplied, "", nil, 1, []models.CheckResult{{Resource: "mod.svc", OK: true, At: time.Now().UTC()}})
	l.a.setApplying(false)
	l.waitLooks(t, during)
	l.noFailureReported(t)
}

// TestCheckLoop_LookStraddlingAnApplyThatFailed: a look that began before
// an apply and ends after it — the apply ended without applying (rejected,
// refused part way) — is stale all the same: what it saw was the service
// being replaced, not generation 5's.
func TestCheckLoop_LookStraddlingAnApplyThatFailed(t *testing.T) {
	l := newLookedAt(t)
	l.hold()
	l.a.setApplying(true)
	l.a.setApplying(false) // generation 6's apply ends, not applied
	during := l.let()
	l.waitLooks(t, during+1)
	l.noFailureReported(t)
}
