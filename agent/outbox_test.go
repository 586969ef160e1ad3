package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/models"
	"mesh/testwait"
	"mesh/version"
)

// reportServer stands in for the controller's report endpoint: it answers
// each report with the status its reason names ("status 422"), 201 when it
// names none, and keeps what it was sent.
type reportServer struct {
	*httptest.Server
	mu   sync.Mutex
	got  []models.Report
	once map[string]int // reason → statuses to answer, then 201
}

func newReportServer(t *testing.T) *reportServer {
	t.Helper()
	s := &reportServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var rep models.Report
		if r.URL.Path != "/api/v1/host/reports" || json.Unmarshal(b, &rep) != nil {
			http.Error(w, "not a report", http.StatusTeapot)
			return
		}
		if at, err := time.Parse(time.RFC3339Nano, r.Header.Get(models.HostTimeHeader)); err == nil {
			rep.HostNow = &at
		}
		s.mu.Lock()
		s.got = append(s.got, rep)
		s.mu.Unlock()
		var status int
		if _, err := fmt.Sscanf(rep.Reason, "status %d", &status); err != nil || status == 0 {
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type": "about:blank", "title": "no", "status": %d, "detail": "the controller says no to %s"}`, status, rep.Reason)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *reportServer) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.got {
		out = append(out, r.Reason)
	}
	return out
}

// agentReportingTo is a test agent whose client and outbox talk to srv.
func agentReportingTo(t *testing.T, srv *reportServer) *Agent {
	t.Helper()
	a := testAgent(t)
	a.client = newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
	a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
	return a
}

// queue puts reports in a's outbox in this order.
func queue(t *testing.T, a *Agent, rs ...models.Report) {
	t.Helper()
	if err := os.MkdirAll(a.outbox.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		b, _ := json.Marshal(r)
		if err := os.WriteFile(filepath.Join(a.outbox.dir, fmt.Sprintf("%020d.json", i+1)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func queued(t *testing.T, a *Agent) int {
	t.Helper()
	ents, _ := os.ReadDir(a.outbox.dir)
	return len(ents)
}

// TestOutbox_RefusedReportJournaledNotRetried: a report the controller
// refuses with a 4xx (not 401, 408, 429) leaves the outbox for the journal
// with the status and the problem's detail, is never sent again, and the
// reports after it go on.
func TestOutbox_RefusedReportJournaledNotRetried(t *testing.T) {
	for _, status := range []int{400, 403, 404, 409, 422} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv := newReportServer(t)
			a := agentReportingTo(t, srv)
			queue(t, a,
				models.Report{Send: "s4", Generation: 5, Outcome: models.OutcomeApplied, Reason: fmt.Sprintf("status %d", status), Actions: []models.Action{{Resource: "m.f", Action: "created"}}},
				models.Report{Send: "s6", Generation: 6, Outcome: models.OutcomeApplied, Reason: "after it"})
			if err := a.outbox.flush(context.Background(), a.client); err != nil {
				t.Fatalf("flush: %v", err)
			}
			if got := srv.sent(); strings.Join(got, "|") != fmt.Sprintf("status %d|after it", status) {
				t.Fatalf("sent %q", got)
			}
			if n := queued(t, a); n != 0 {
				t.Fatalf("%d report(s) left in the outbox", n)
			}
			j, err := ReadJournal(a.cfg.StateDir)
			if err != nil || len(j) != 1 {
				t.Fatalf("journal %+v %v", j, err)
			}
			e := j[0]
			want := fmt.Sprintf("the controller says no to status %d", status)
			if e.ReportRefused == nil || e.ReportRefused.Status != status || e.ReportRefused.Detail != want ||
				e.Send != "s4" || e.Generation != 5 || e.Outcome != models.OutcomeApplied || len(e.Actions) != 1 {
				t.Fatalf("journal entry %+v (refusal %+v)", e, e.ReportRefused)
			}
			if s := e.String(); !strings.Contains(s, fmt.Sprintf("report refused by the controller (%d): %s", status, want)) {
				t.Fatalf("journal words: %s", s)
			}
			// Never sent again.
			if err := a.outbox.flush(context.Background(), a.client); err != nil {
				t.Fatal(err)
			}
			if n := len(srv.sent()); n != 2 {
				t.Fatalf("%d reports sent after a second flush", n)
			}
		})
	}
}

// TestOutbox_RetriedStatusesStayQueued: a network error, a 5xx, 401, 408
// and 429 leave the report queued (and the ones after it behind it), and
// nothing is journaled: it is sent again at the next flush.
func TestOutbox_RetriedStatusesStayQueued(t *testing.T) {
	for _, status := range []int{401, 408, 429, 500, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			srv := newReportServer(t)
			a := agentReportingTo(t, srv)
			queue(t, a, models.Report{Generation: 5, Outcome: models.OutcomeApplied, Reason: fmt.Sprintf("status %d", status)},
				models.Report{Generation: 5, Outcome: models.OutcomeApplied, Reason: "after it"})
			if err := a.outbox.flush(context.Background(), a.client); err == nil {
				t.Fatal("flush said all was sent")
			}
			if got := srv.sent(); len(got) != 1 {
				t.Fatalf("sent %q: the report after a retried one went ahead of it", got)
			}
			if n := queued(t, a); n != 2 {
				t.Fatalf("%d report(s) queued, want 2", n)
			}
			if j, _ := ReadJournal(a.cfg.StateDir); len(j) != 0 {
				t.Fatalf("journaled %+v", j)
			}
		})
	}
	t.Run("network", func(t *testing.T) {
		a := testAgent(t) // its controller, 127.0.0.1:1, is not there
		a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
		if _, err := a.outbox.put(models.Report{Generation: 5, Outcome: models.OutcomeApplied}); err != nil {
			t.Fatal(err)
		}
		if err := a.outbox.flush(context.Background(), a.client); err == nil || queued(t, a) != 1 {
			t.Fatalf("flush %v, %d queued", err, queued(t, a))
		}
	})
}

// TestHostStartedReports_NameTheLastAppliedSend: reports the host starts
// itself — a refused host release, a rollback the launcher recorded —
// name the send it last applied, with its generation.
func TestHostStartedReports_NameTheLastAppliedSend(t *testing.T) {
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	a.state.Applied, a.state.AppliedDigest, a.state.AppliedSend, a.state.Finished = 7, "sha256:d7", "send-7", 7
	a.id = &Identity{}

	// A release for another platform is refused.
	other := "plan9"
	if runtime.GOOS == other {
		other = "linux"
	}
	if err := a.maybeUpgrade(context.Background(), &models.HostRelease{Version: "9.9.9", OS: other, Arch: runtime.GOARCH, Digest: "sha256:r"}, 7); err != nil {
		t.Fatal(err)
	}
	// The launcher put known-good back.
	if err := writeJSONAtomic(rollbackPath(a.cfg.StateDir), rollback{From: "9.9.9", To: "1.0.0", Digest: "sha256:r", Reason: "exited early"}, 0o600); err != nil {
		t.Fatal(err)
	}
	a.reportRollback(context.Background())

	got := srv.reports()
	if len(got) != 2 {
		t.Fatalf("reports %+v", got)
	}
	for i, want := range []string{models.OutcomeRefused, models.OutcomeRolledBack} {
		if r := got[i]; r.Outcome != want || r.Send != "send-7" || r.Generation != 7 {
			t.Errorf("%s report names send %q, generation %d; want send-7, 7", want, r.Send, r.Generation)
		}
	}
	j, _ := ReadJournal(a.cfg.StateDir)
	for _, e := range j {
		if e.Send != "send-7" {
			t.Errorf("journal entry %s names send %q", e.Outcome, e.Send)
		}
	}

	// Before anything was applied there is no send to name.
	b := agentReportingTo(t, srv)
	b.id = &Identity{}
	if b.sendOf(0) != "" || a.sendOf(6) != "" {
		t.Fatal("a send named for a generation that is not the last applied")
	}
}

// TestUpgrade_WithoutLauncherIsRefusedOnTheRecord: a host not run under
// `mesh-host launch` cannot upgrade (nothing would roll a bad release
// back); it says so in a refused report naming the release, not only in
// its own log, so its machine does not look as if it were upgrading.
func TestUpgrade_WithoutLauncherIsRefusedOnTheRecord(t *testing.T) {
	t.Setenv(EnvLauncher, "")
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	a.state.Applied, a.state.AppliedDigest, a.state.AppliedSend, a.state.Finished = 7, "sha256:d7", "send-7", 7
	a.id = &Identity{}
	if err := a.maybeUpgrade(context.Background(), &models.HostRelease{Version: "9.9.9", OS: runtime.GOOS, Arch: runtime.GOARCH, Digest: "sha256:r"}, 7); err != nil {
		t.Fatal(err)
	}
	got := srv.reports()
	if len(got) != 1 || got[0].Outcome != models.OutcomeRefused || !strings.Contains(got[0].Reason, "host release 9.9.9 refused") ||
		!strings.Contains(got[0].Reason, "mesh-host launch") {
		t.Fatalf("reports %+v, want one refusal of 9.9.9 naming mesh-host launch", got)
	}
}

// TestUpgrade_ARefusedReleaseNamedAgainIsRefusedOnTheRecord: a release this
// host rolled back before, named again by a later rollout, is not fetched;
// the host says so in a refused report naming the release, so the rollout
// halts with why rather than waiting out its deadline for an upgrade that
// never comes and failing the release.
func TestUpgrade_ARefusedReleaseNamedAgainIsRefusedOnTheRecord(t *testing.T) {
	t.Setenv(EnvLauncher, "1")
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	a.state.Applied, a.state.AppliedDigest, a.state.AppliedSend, a.state.Finished = 7, "sha256:d7", "send-7", 7
	a.state.RefusedReleases = []string{"sha256:r"}
	a.id = &Identity{}
	if err := a.maybeUpgrade(context.Background(), &models.HostRelease{Version: "9.9.9", OS: runtime.GOOS, Arch: runtime.GOARCH, Digest: "sha256:r"}, 7); err != nil {
		t.Fatal(err)
	}
	got := srv.reports()
	if len(got) != 1 || got[0].Outcome != models.OutcomeRefused || got[0].Send != "send-7" ||
		!strings.Contains(got[0].Reason, "host release 9.9.9 refused") || !strings.Contains(got[0].Reason, "rolled back on this host before") {
		t.Fatalf("reports %+v, want one refusal of 9.9.9 saying it was rolled back here", got)
	}
}

// TestTrial_MarkerOnlyOnceAnAnswerIsHandled: a trial build's upgraded
// report is accepted at its first poll, but the reconcile marker — what
// makes its launcher keep it — waits until the build has handled a poll's
// answer (a 304, or a declaration's first apply): a build that died
// applying the generation its new schemas brought was kept, and restarted
// for good.
func TestTrial_MarkerOnlyOnceAnAnswerIsHandled(t *testing.T) {
	t.Setenv(EnvTrialVersion, version.Version)
	t.Setenv(EnvTrialDeadline, "600")
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	a.id = &Identity{}
	a.trial(context.Background())
	got := srv.reports()
	if len(got) != 1 || got[0].Outcome != models.OutcomeUpgraded {
		t.Fatalf("reports %+v, want the upgraded one", got)
	}
	marker := markerPath(a.cfg.StateDir, version.Version)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the marker was written before the build handled anything")
	}
	a.trialReconciled()
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("no marker once an answer was handled: %v", err)
	}
}

// TestTrial_KeepsTheReleaseToResume: a trial build's 304 does not forget
// the release the applied generation names: until the launcher keeps the
// build, a power loss brings back the build before it, which must find
// the upgrade to resume. A build not on trial running it forgets it.
func TestTrial_KeepsTheReleaseToResume(t *testing.T) {
	for _, trial := range []bool{true, false} {
		if trial {
			t.Setenv(EnvTrialVersion, version.Version)
		} else {
			t.Setenv(EnvTrialVersion, "")
		}
		a := agentReportingTo(t, newReportServer(t))
		a.state.Applied = 7
		a.state.HostRelease, a.state.HostReleaseGen = &models.HostRelease{Version: version.Version, Digest: "sha256:r"}, 7
		a.resumeUpgrade(context.Background())
		st, err := LoadState(a.cfg.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case trial && a.state.HostRelease == nil:
			t.Fatal("on trial, the release to resume was forgotten")
		case !trial && (a.state.HostRelease != nil || st.HostRelease != nil):
			t.Fatal("running the release, not on trial, it is still kept to resume")
		}
	}
}

// TestTrial_MarkerByHalfTheDeadline: a trial build whose first apply takes
// long (trees to fetch) is not run out of its trial's time by it: by half
// the deadline, counted from the process's start as its launcher counts
// it, it has shown it runs and writes the marker without having handled
// an answer — not at once (a launcher of an earlier release does not say
// its deadline: the default is assumed).
func TestTrial_MarkerByHalfTheDeadline(t *testing.T) {
	defer func(s time.Time) { processStart = s }(processStart)
	for _, tc := range []struct {
		deadline string
		started  time.Duration // before now
	}{{"4", 0}, {"", defaultTrialDeadline/2 - time.Second}} {
		t.Setenv(EnvTrialVersion, version.Version)
		t.Setenv(EnvTrialDeadline, tc.deadline)
		processStart = time.Now().Add(-tc.started)
		a := agentReportingTo(t, newReportServer(t))
		a.id = &Identity{}
		a.trial(context.Background())
		marker := markerPath(a.cfg.StateDir, version.Version)
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("deadline %q: the marker at once, before the build handled anything", tc.deadline)
		}
		testwait.For(t, 5*time.Second, "the marker by half the deadline", func() bool {
			_, err := os.Stat(marker)
			return err == nil
		})
	}
}

// TestOutbox_ReportSentWhenTheOutboxCannotBeWritten: a state dir that will
// not take the report (here the outbox's directory cannot be made, as on a
// full disk) does not keep an apply from the controller: the report is
// held in memory and sent from there, and the generation is finished on
// the host, so nothing else would ever tell the controller of it.
func TestOutbox_ReportSentWhenTheOutboxCannotBeWritten(t *testing.T) {
	srv := newReportServer(t)
	a := m1Host(t, srv)
	a.services = &fakeServices{}
	if err := os.WriteFile(filepath.Join(a.cfg.StateDir, "outbox"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	content := "x=1\n"
	env, _ := signDecl(t, models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 6, Resources: []models.Resource{
		{ID: "new.conf", Module: "new", Build: 1, Kind: "file", Path: "/etc/new.conf", Content: &content}}})
	a.handle(context.Background(), &pollResult{body: env, send: "0193b1f2-0000-7000-8000-000000000006", etag: `"6"`})
	if a.state.Applied != 6 {
		t.Fatalf("generation 6 was not applied (applied %d)", a.state.Applied)
	}
	if rs := srv.reports(); len(rs) != 1 || rs[0].Generation != 6 || rs[0].Outcome != models.OutcomeApplied {
		t.Fatalf("reports %+v, want generation 6 applied", rs)
	}
	if a.outbox.heldAny() {
		t.Fatal("a report sent is still held")
	}
}

// TestOutbox_HeldReportsKeepTheirOrder: reports the disk would not take are
// held in memory while the controller is away, and go out after those
// queued before them, in order, once it is back; the next report the disk
// takes writes the held ones first.
func TestOutbox_HeldReportsKeepTheirOrder(t *testing.T) {
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	queue(t, a, models.Report{Generation: 1, Reason: "on disk"})
	down := newClient(&Identity{Controllers: []string{"http://127.0.0.1:1"}, Token: "t"})
	blocker := a.outbox.dir + ".moved"
	if err := os.Rename(a.outbox.dir, blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.outbox.dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"held 1", "held 2"} {
		if _, err := a.outbox.put(models.Report{Generation: 2, Reason: r}); err == nil {
			t.Fatal("put said a report was written where the outbox is a file")
		}
	}
	if err := a.outbox.flush(context.Background(), down); err == nil {
		t.Fatal("flush said all was sent to a controller that is not there")
	}
	// The disk takes reports again.
	if err := os.Remove(a.outbox.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(blocker, a.outbox.dir); err != nil {
		t.Fatal(err)
	}
	if _, err := a.outbox.put(models.Report{Generation: 3, Reason: "after"}); err != nil {
		t.Fatal(err)
	}
	if a.outbox.heldAny() || queued(t, a) != 4 {
		t.Fatalf("%d queued on disk (held: %v), want all 4", queued(t, a), a.outbox.heldAny())
	}
	if err := a.outbox.flush(context.Background(), a.client); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(srv.sent(), " | "); got != "on disk | held 1 | held 2 | after" {
		t.Fatalf("sent %q", got)
	}
}

// TestOutbox_OrderIsTheOrderWritten: the controller is out of reach;
// generation 7's first attempt fails (report "failed" queued, named as an
// earlier release named it, by the clock), the clock is then stepped back
// an hour (NTP after a VM resumed), and the second attempt applies it
// (report "applied" queued). Reports leave in the order they were queued:
// named by the clock, "applied" went first and "failed" last, and the
// controller (which takes the last report of the latest generation as its
// outcome) showed generation 7 failed though it was applied.
func TestOutbox_OrderIsTheOrderWritten(t *testing.T) {
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	if err := os.MkdirAll(a.outbox.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Queued before the clock was stepped back an hour.
	b, _ := json.Marshal(models.Report{Send: "s7", Generation: 7, Outcome: models.OutcomeFailed, Reason: "attempt 1 failed", Attempt: 1})
	before := filepath.Join(a.outbox.dir, fmt.Sprintf("%020d.json", time.Now().Add(time.Hour).UnixNano()))
	if err := os.WriteFile(before, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Queued after it.
	if _, err := a.outbox.put(models.Report{Send: "s7", Generation: 7, Outcome: models.OutcomeApplied, Reason: "attempt 2 applied", Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	if err := a.outbox.flush(context.Background(), a.client); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(srv.sent(), " | "); got != "attempt 1 failed | attempt 2 applied" {
		t.Fatalf("sent in the order %q: the controller's last word on generation 7 is that it failed", got)
	}
}

// TestUpgrade_ARefusedBareHostStartedUnderTheLauncherUpgrades: a host run
// bare refuses the release its generation names, saying to run it under
// `mesh-host launch`; started so, it stayed on its version until a new
// generation named the release again (a person's push): the refusal had
// let the release go.
func TestUpgrade_ARefusedBareHostStartedUnderTheLauncherUpgrades(t *testing.T) {
	t.Setenv(EnvLauncher, "")
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	a.state.Applied, a.state.AppliedDigest, a.state.AppliedSend, a.state.Finished = 7, "sha256:d7", "send-7", 7
	a.id = &Identity{}
	h := &models.HostRelease{Version: "9.9.9", OS: runtime.GOOS, Arch: runtime.GOARCH, Digest: "sha256:r"}
	a.state.HostRelease, a.state.HostReleaseGen = h, 7 // as the apply keeps it before the upgrade
	a.upgrade(context.Background(), h, 7)
	if got := srv.reports(); len(got) != 1 || !strings.Contains(got[0].Reason, "mesh-host launch") {
		t.Fatalf("reports %+v, want one refusal naming mesh-host launch", got)
	}
	a.resumeUpgrade(context.Background()) // the next poll, still bare
	if got := srv.reports(); len(got) != 1 {
		t.Fatalf("a bare host's next poll refused the release again: reports %+v", got)
	}
	t.Setenv(EnvLauncher, "1") // started again under the launcher
	a.resumeUpgrade(context.Background())
	got := srv.reports()
	// No trusted key here: the attempt ends at the signature, which says
	// the release was taken up.
	if len(got) != 2 || !strings.Contains(got[1].Reason, "signature") {
		t.Fatalf("reports %+v: the host under the launcher did not take up the release its generation names", got)
	}
}
