package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
)

type rolloutView struct {
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Machines []struct {
		Machine    string     `json:"machine"`
		Wave       int64      `json:"wave"`
		State      string     `json:"state"`
		Reason     string     `json:"reason"`
		StartedAt  *time.Time `json:"started_at"`
		FinishedAt *time.Time `json:"finished_at"`
	} `json:"machines"`
}

func (c *controllerProc) release(file, version string) {
	c.t.Helper()
	c.releaseSchemas(file, version, "1,2")
}

// releaseSchemas uploads bin/file as host release version recording that
// it decodes schemas (which may be untrue of the binary).
func (c *controllerProc) releaseSchemas(file, version, schemas string) {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(bin, file))
	if err != nil {
		c.t.Fatal(err)
	}
	resp, body := c.UploadReleaseSchemas(c.Admin, version, schemas, b)
	if resp.StatusCode != 201 {
		c.t.Fatalf("release %s: %d %s", version, resp.StatusCode, body)
	}
}

func (c *controllerProc) rollout(version string) rolloutView {
	c.t.Helper()
	var v rolloutView
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/" + version + "/rollout", Token: c.Admin,
		Body: map[string]any{"canary": 1, "max_in_flight": 1, "deadline": "60s"}}, 201, &v)
	return v
}

func (c *controllerProc) waitRollout(version string, d time.Duration, states ...string) rolloutView {
	c.t.Helper()
	var v rolloutView
	waitFor(c.t, d, "rollout of "+version+" "+strings.Join(states, "/"), func() bool {
		c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases/" + version + "/rollout", Token: c.Admin}, 200, &v)
		for _, s := range states {
			if v.State == s {
				return true
			}
		}
		return false
	})
	return v
}

func (c *controllerProc) hostVersion(name string) string {
	return c.machine(name).HostVersion
}

// TestHostUpgrade_RolloutAndAutomaticRollback: three hosts on v1 under
// `mesh-host launch`. v2 (a real build) rolls out canary first, then the
// others. v3 exits at start and v4 never polls: each time the canary rolls
// itself back to v2 within the deadline, the rollout halts and says why,
// and the other machines never leave v2. v5 is today's host uploaded as
// decoding schema 1 only: its trial's poll advertises 1,2, the controller
// fails the trial and refuses its upgraded report, so the canary's
// launcher puts v2 back too (before that refusal, the report was taken,
// the launcher called v5 known-good and m2 stayed on the failed release).
// Services run on throughout.
func TestHostUpgrade_RolloutAndAutomaticRollback(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	names := []string{"m1", "m2", "m3"}
	hosts := map[string]*hostProc{}
	ports := map[string]string{}
	for _, n := range names {
		h := enroll(t, c, n, c.URL)
		h.launch = true
		h.start("--trial-deadline", "8s")
		hosts[n], ports[n] = h, freePort(t)
		vars := map[string]string{"port": ports[n]}
		if n == "m2" {
			vars["canary"] = "true" // the canary is chosen by variable, not by name
		}
		c.setVars(n, vars)
		c.assign(n, "node-tools")
	}
	for _, n := range names {
		c.waitApplied(n, 30*time.Second)
		waitFor(t, 10*time.Second, n+" service", func() bool { return listening(ports[n]) })
	}
	pids := map[string]int{}
	for _, n := range names {
		pids[n] = svcPID(t, hosts[n])
	}

	// v2: the canary first, then the others, one at a time.
	c.release("mesh-host-2", "2.0.0")
	c.rollout("2.0.0")
	v := c.waitRollout("2.0.0", 90*time.Second, "done", "halted")
	if v.State != "done" {
		t.Fatalf("rollout of v2: %+v", v)
	}
	var canaryDone time.Time
	for _, m := range v.Machines {
		if m.Machine == "m2" {
			if m.Wave != 0 {
				t.Fatalf("m2 is not the canary: %+v", v.Machines)
			}
			canaryDone = *m.FinishedAt
		}
	}
	for _, m := range v.Machines {
		if m.State != "upgraded" {
			t.Fatalf("%s: %s", m.Machine, m.State)
		}
		if m.Machine != "m2" && m.StartedAt.Before(canaryDone) {
			t.Fatalf("%s started before the canary finished", m.Machine)
		}
	}
	for _, n := range names {
		waitFor(t, 10*time.Second, n+" reports v2", func() bool { return c.hostVersion(n) == "2.0.0" })
		if got := svcPID(t, hosts[n]); got != pids[n] || copies(ports[n]) != 1 {
			t.Fatalf("%s: the service changed across the upgrade (pid %d → %d, %d copies)", n, pids[n], got, copies(ports[n]))
		}
	}

	for _, bad := range []struct{ file, version, schemas, halt, says string }{
		{"exitatstart", "3.0.0", "1,2", "machine m2 rolled back", "exited before completing a reconcile"},
		{"neverpolls", "4.0.0", "1,2", "machine m2 rolled back", "did not complete a reconcile within 8s"},
		{"mesh-host-5", "5.0.0", "1", "machine m2 failed", "its trial poll advertised schemas 1,2; release 5.0.0 records 1"},
	} {
		c.releaseSchemas(bad.file, bad.version, bad.schemas)
		c.rollout(bad.version)
		v := c.waitRollout(bad.version, 90*time.Second, "halted", "done")
		if v.State != "halted" || !strings.Contains(v.Reason, bad.halt) || !strings.Contains(v.Reason, bad.says) {
			t.Fatalf("rollout of %s: %+v", bad.version, v)
		}
		for _, m := range v.Machines {
			if m.Machine != "m2" && (m.State != "withdrawn" || !strings.Contains(m.Reason, "never reached")) { // never tried: the rollout halted first
				t.Fatalf("%s left v2 during the rollout of %s: %+v", m.Machine, bad.version, m)
			}
		}
		var rels struct{ Items []models.Release }
		c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases", Token: c.Admin}, 200, &rels)
		for _, r := range rels.Items {
			if r.Version == bad.version && (r.State != "failed" || r.FailedAt == nil || !strings.Contains(r.Failure, bad.says)) {
				t.Fatalf("release %s: %+v", bad.version, r)
			}
		}
		// The canary is back on v2, its target too; the others never left.
		waitFor(t, 30*time.Second, "m2 back on v2 and current", func() bool {
			m := c.machine("m2")
			return m.HostVersion == "2.0.0" && m.AppliedGeneration == m.Generation
		})
		var m2 struct {
			Target string `json:"target_host_version"`
		}
		c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m2", Token: c.Admin}, 200, &m2)
		if m2.Target != "2.0.0" {
			t.Fatalf("m2's target is %q after the rollback", m2.Target)
		}
		for _, n := range names {
			if c.hostVersion(n) != "2.0.0" {
				t.Fatalf("%s runs %s", n, c.hostVersion(n))
			}
			if got := svcPID(t, hosts[n]); got != pids[n] || copies(ports[n]) != 1 {
				t.Fatalf("%s: the service changed across the rollback (pid %d → %d)", n, pids[n], got)
			}
		}
		c.waitReport("m2", "rolled_back", "rolled back from "+bad.version+" to 2.0.0")
	}
	j := hosts["m2"].journalText()
	if !strings.Contains(j, "rolled_back") || !strings.Contains(j, "upgraded from 1.0.0 to 2.0.0") ||
		!strings.Contains(j, "report refused by the controller (409): upgraded report refused: the trial of host release 5.0.0 on machine m2 failed") {
		t.Fatalf("m2's journal:\n%s", j)
	}
}

func svcPID(t *testing.T, h *hostProc) int {
	var rec struct{ PID int }
	b, err := os.ReadFile(filepath.Join(h.State, "services", "node-tools.service.pid"))
	if err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("no pidfile: %v", err)
	}
	return rec.PID
}

// TestHostRelease_BadDigestOrSignatureRefused: a release whose bytes do not
// match its digest, or whose signature is wrong, is refused and reported;
// the running binary is untouched.
func TestHostRelease_BadDigestOrSignatureRefused(t *testing.T) {
	c := startController(t, store.SQLite)
	px := newProxy(t, c.URL)
	h := enroll(t, c, "m1", px.URL)
	h.launch = true
	h.start("--trial-deadline", "8s")
	c.waitApplied("m1", 30*time.Second)

	px.mu.Lock()
	px.corruptBlobs = true
	px.mu.Unlock()
	c.release("mesh-host-2", "2.0.0")
	c.rollout("2.0.0")
	c.waitReport("m1", "refused", "host release 2.0.0 refused")
	if c.hostVersion("m1") != "1.0.0" || exists(filepath.Join(h.State, "launch.json")) {
		t.Fatal("a release with bad bytes was staged")
	}
	// The refusal halted the rollout with its words, at once (not at the
	// deadline); the release is not marked failed by it.
	var ro struct {
		State, Reason string
		Machines      []struct{ State string }
	}
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases/2.0.0/rollout", Token: c.Admin}, 200, &ro)
	if ro.State != "halted" || !strings.Contains(ro.Reason, "machine m1 refused: host release 2.0.0 refused") || len(ro.Machines) != 1 || ro.Machines[0].State != "refused" {
		t.Fatalf("the rollout after m1 refused the release: %+v", ro)
	}
	px.mu.Lock()
	px.corruptBlobs = false
	px.mu.Unlock()

	// A wrong signature: the stored release's signature is damaged (as a
	// tampered store would have it).
	c.release("mesh-host-2", "2.0.1")
	st, err := store.Open(context.Background(), c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DB().Exec("UPDATE host_releases SET signature = ? WHERE version = ?", make([]byte, 64), "2.0.1").Error; err != nil {
		t.Fatal(err)
	}
	st.Close()
	c.rollout("2.0.1")
	r := c.waitReport("m1", "refused", "host release 2.0.1 refused: its signature does not verify")
	_ = r
	if c.hostVersion("m1") != "1.0.0" || exists(filepath.Join(h.State, "versions", "2.0.1")) {
		t.Fatal("a release with a bad signature was staged")
	}
	if !strings.Contains(h.journalText(), "signature does not verify") {
		t.Fatal("the refusal is not in the journal")
	}
}

// TestHostUpgrade_ResumedAfterAKill: a host killed while it downloads a
// rolled-out release (kill -9: an OOM, a power loss) is started again by
// its launcher and, its generation long applied, is told nothing new. It
// never tried the release again: the rollout waited out its deadline and
// a good release was marked failed for the fleet. Now the host resumes
// the upgrade its applied generation names, and the rollout completes.
func TestHostUpgrade_ResumedAfterAKill(t *testing.T) {
	c := startController(t, store.SQLite)
	u, err := url.Parse(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	// A relay that holds the first download of a blob until it is let go.
	rp := httputil.NewSingleHostReverseProxy(u)
	var mu sync.Mutex
	stall, blobAsked := true, make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/blobs/") {
			mu.Lock()
			s := stall
			mu.Unlock()
			if s {
				blobAsked <- struct{}{}
				<-r.Context().Done()
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()
	h := enroll(t, c, "m1", srv.URL)
	h.launch = true
	h.start("--trial-deadline", "8s")
	c.waitApplied("m1", 30*time.Second)

	c.release("mesh-host-2", "2.0.0")
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/2.0.0/rollout", Token: c.Admin,
		Body: map[string]any{"canary": 1, "max_in_flight": 1, "deadline": "60s"}}, 201, nil)
	select {
	case <-blobAsked:
	case <-time.After(30 * time.Second):
		t.Fatal("the host never asked for the release's blob")
	}
	var ls struct {
		HostPID int `json:"host_pid"`
	}
	b, _ := os.ReadFile(filepath.Join(h.State, "launcher.json"))
	if err := json.Unmarshal(b, &ls); err != nil || ls.HostPID == 0 {
		t.Fatalf("launcher.json names no host: %v %s", err, b)
	}
	if err := syscall.Kill(ls.HostPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	stall = false
	mu.Unlock()
	if v := c.waitRollout("2.0.0", 90*time.Second, "halted", "done"); v.State != "done" {
		t.Fatalf("the rollout after its host was killed mid-download: %s %q", v.State, v.Reason)
	}
	if v := c.hostVersion("m1"); v != "2.0.0" {
		t.Fatalf("m1 runs %s, want 2.0.0", v)
	}
}

// TestHostUpgrade_KeptReleaseThatCrashLoopsIsRolledBack: release 6.0.0
// wins its trial on m1 (a real host build on trial), is kept, its rollout
// done and its version the fleet's default — and then its host dies at
// every start. The launcher started it again for good, and the machine
// went offline on the release its controller called good. Now, after five
// quick exits in a row, the launcher puts 1.0.0 back; that host reports
// rolled_back saying why, and the controller fails the release even though
// its rollout was done, puts m1's target back, and the default goes.
func TestHostUpgrade_KeptReleaseThatCrashLoopsIsRolledBack(t *testing.T) {
	c := startController(t, store.SQLite)
	h := enroll(t, c, "m1", c.URL)
	h.launch = true
	h.start("--trial-deadline", "8s")
	c.waitApplied("m1", 30*time.Second)

	c.release("keptthencrash", "6.0.0")
	c.rollout("6.0.0")
	if v := c.waitRollout("6.0.0", 90*time.Second, "done", "halted"); v.State != "done" {
		t.Fatalf("rollout of 6.0.0: %+v", v)
	}
	// The launcher moves to 6.0.0 and completes its own trial: the host it
	// runs is the one the trial started.
	var st struct {
		Launcher string          `json:"launcher"`
		Trial    json.RawMessage `json:"launcher_trial"`
		HostPID  int             `json:"host_pid"`
	}
	waitFor(t, 30*time.Second, "the launcher on 6.0.0, its trial done", func() bool {
		b, err := os.ReadFile(filepath.Join(h.State, "launcher.json"))
		st.Trial = nil
		return err == nil && json.Unmarshal(b, &st) == nil && st.Launcher == "6.0.0" && len(st.Trial) == 0 && st.HostPID > 0
	})
	// The host dies; from now on 6.0.0's host exits at every start.
	if err := syscall.Kill(st.HostPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := c.waitReport("m1", "rolled_back", "rolled back from 6.0.0 to 1.0.0")
	if !strings.Contains(r.Reason, "exited 5 times in a row") || !strings.Contains(r.Reason, "exit status 1") {
		t.Fatalf("the rolled_back report says %q", r.Reason)
	}
	waitFor(t, 30*time.Second, "m1 on 1.0.0, its target back", func() bool {
		m := c.machine("m1")
		return m.HostVersion == "1.0.0" && m.TargetHostVersion != "6.0.0"
	})
	var rels struct{ Items []models.Release }
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases", Token: c.Admin}, 200, &rels)
	for _, r := range rels.Items {
		if r.Version == "6.0.0" && (r.State != "failed" || !strings.Contains(r.Failure, "exited 5 times in a row")) {
			t.Fatalf("release 6.0.0 after its kept host crash-looped: %+v", r)
		}
	}
	if v := c.waitRollout("6.0.0", 10*time.Second, "halted"); !strings.Contains(v.Reason, "rolled back") {
		t.Fatalf("rollout of 6.0.0: %+v", v)
	}
	// The launcher follows the host back to 1.0.0, trial and all: the
	// stable path names no release known to fail.
	waitFor(t, 30*time.Second, "the launcher back on 1.0.0, its trial done", func() bool {
		b, err := os.ReadFile(filepath.Join(h.State, "launcher.json"))
		st.Trial = nil
		return err == nil && json.Unmarshal(b, &st) == nil && st.Launcher == "1.0.0" && len(st.Trial) == 0
	})
	if target, err := os.Readlink(filepath.Join(h.State, "bin", "mesh-host")); err != nil || strings.Contains(target, "6.0.0") {
		t.Fatalf("the stable path names %q (%v), a release known to fail", target, err)
	}
}
