package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"mesh/client"
	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/testwait"
)

// meshctl is the built binary and the environment it runs in: a config
// dir of its own, no MESH_* variables of the person running the tests.
type meshctl struct {
	t   *testing.T
	bin string
	env []string
	cfg string // its XDG_CONFIG_HOME
}

func buildMeshctl(t *testing.T) *meshctl {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "meshctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "config")
	env := []string{"HOME=" + dir, "XDG_CONFIG_HOME=" + cfg}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MESH_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	return &meshctl{t: t, bin: bin, env: env, cfg: cfg}
}

// result is what one run of meshctl printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs meshctl to its end (at most a minute) with stdin.
func (m *meshctl) run(stdin string, args ...string) result {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.bin, args...)
	cmd.Env = m.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		m.t.Fatalf("meshctl %v: %v", args, err)
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") {
		m.t.Fatalf("meshctl %v printed a Go stack:\n%s", args, r)
	}
	return r
}

// ok runs meshctl and fails the test unless it exits 0; -o json output is
// decoded into out.
func (m *meshctl) ok(out any, args ...string) result {
	m.t.Helper()
	r := m.run("", args...)
	if r.code != 0 {
		m.t.Fatalf("meshctl %v: %s", args, r)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(r.stdout), out); err != nil {
			m.t.Fatalf("meshctl %v: decoding %q: %v", args, r.stdout, err)
		}
	}
	return r
}

// fakeHost is a host that polls and reports through the host protocol
// without applying anything: it reports applied, with the builds the
// declaration names as running, or refused for a build it is told to
// refuse.
type fakeHost struct {
	name   string
	c      *client.ClientWithResponses
	known  int
	refuse atomic.Int64 // a build of module "app" to refuse; 0: none
}

func startHost(t *testing.T, e *ctltest.Env, name string) *fakeHost {
	t.Helper()
	en := e.Enroll(name)
	c, err := client.NewClientWithResponses(e.URL, client.WithHTTPClient(e.HTTP),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+en.Token)
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{name: name, c: c}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := h.step(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("host %s: %v", name, err)
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return h
}

// step is one poll (of at most a second) and the report of what came.
func (h *fakeHost) step(ctx context.Context) error {
	known, wait, schema, ver := strconv.Quote(strconv.Itoa(h.known)), "1s", "1", "1.0.0"
	p, err := h.c.PollDeclarationWithResponse(ctx, &client.PollDeclarationParams{Wait: &wait, IfNoneMatch: &known, XMeshSchema: &schema, XMeshHostVersion: &ver})
	if err != nil {
		return err
	}
	if p.StatusCode() == http.StatusNotModified {
		return nil
	}
	if p.JSON200 == nil {
		return fmt.Errorf("poll: %d %s", p.StatusCode(), p.Body)
	}
	var d client.Declaration
	if err := json.Unmarshal(p.JSON200.Payload, &d); err != nil {
		return err
	}
	send := p.HTTPResponse.Header.Get("X-Mesh-Send")
	report := client.CreateReportJSONRequestBody{Send: &send, Generation: &d.Generation, Outcome: client.ReportOutcomeApplied}
	running := map[string]client.RunningBuild{}
	for _, r := range d.Resources {
		running[r.Module] = client.RunningBuild{Build: r.Build}
		if r.Module == "app" && int64(r.Build) == h.refuse.Load() {
			reason := "the canary says no to build " + strconv.Itoa(r.Build)
			report.Outcome, report.Reason = client.ReportOutcomeRefused, &reason
		}
	}
	if report.Outcome == client.ReportOutcomeApplied {
		report.Running = &running
	}
	r, err := h.c.CreateReportWithResponse(ctx, nil, report)
	if err != nil {
		return err
	}
	if r.StatusCode() != http.StatusCreated {
		return fmt.Errorf("report: %d %s", r.StatusCode(), r.Body)
	}
	h.known = d.Generation
	return nil
}

// meddler is a proxy in front of the controller that, when armed, makes
// another person's change to a machine's assignments just before it
// forwards meshctl's PUT of them, so that PUT is stale (412).
type meddler struct {
	*httptest.Server
	armed atomic.Bool
	done  atomic.Int32 // meddles made
}

func newMeddler(t *testing.T, e *ctltest.Env, change func(machine string)) *meddler {
	t.Helper()
	u, err := url.Parse(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	m := &meddler{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/assignments") && m.armed.CompareAndSwap(true, false) {
			change(strings.Split(r.URL.Path, "/")[4])
			m.done.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(m.Close)
	return m
}

// addAssignment is another person's change: the module added to what the
// machine has, with If-Match, as a careful client does.
func addAssignment(t *testing.T, e *ctltest.Env, machine, module string) {
	var as client.Assignments
	resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/" + machine + "/assignments", Token: e.Admin})
	if resp.StatusCode != 200 || json.Unmarshal(b, &as) != nil {
		t.Errorf("reading %s's assignments: %d %s", machine, resp.StatusCode, b)
		return
	}
	as.Assignments = append(as.Assignments, client.Assignment{Module: module})
	resp, b = e.Do(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + machine + "/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": resp.Header.Get("ETag")}, Body: as})
	if resp.StatusCode != 200 {
		t.Errorf("the other person's change: %d %s", resp.StatusCode, b)
	}
}

const appManifest = `{"resources": [
  {"name": "runtime", "kind": "tree", "path": "/opt/app"},
  {"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "x\n", "mode": "0644"}
]}`

// TestMeshctl_ADayOfAnOperator drives a real controller, over real HTTP,
// through the built meshctl binary only, as a script would (-o json): log
// in, list machines, assign through a 412, upload a directory, watch a plan
// to done and one to halted, make a join token.
func TestMeshctl_ADayOfAnOperator(t *testing.T) {
	mc := buildMeshctl(t)
	e := ctltest.Start(t, store.SQLite, ctltest.Options{RolloutEvery: 100 * time.Millisecond})
	e.AddUser("ops", "admin")
	for _, mod := range []string{"app", "other"} {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": mod}}, 201, nil)
	}
	if resp, b := e.Upload(e.Admin, "other", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/other.conf", "content": "o"}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("uploading other: %d %s", resp.StatusCode, b)
	}
	m1, m2 := startHost(t, e, "m1"), startHost(t, e, "m2")
	_ = m2
	px := newMeddler(t, e, func(machine string) { addAssignment(t, e, machine, "other") })

	t.Run("Login", func(t *testing.T) {
		r := mc.run("password-of-ops\n", "login", px.URL, "--user", "ops", "--password-stdin")
		if r.code != 0 || !strings.Contains(r.stdout, "Logged in to "+px.URL+" as ops") {
			t.Fatalf("login: %s", r)
		}
		path := filepath.Join(mc.cfg, "mesh", "config.json")
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("config %s: %v, mode %v; want 0600", path, err, st.Mode())
		}
		if dst, err := os.Stat(filepath.Dir(path)); err != nil || dst.Mode().Perm() != 0o700 {
			t.Fatalf("config dir: %v, mode %v; want 0700", err, dst.Mode())
		}
		var c config
		b, _ := os.ReadFile(path)
		if err := json.Unmarshal(b, &c); err != nil || c.Controller != px.URL || c.User != "ops" || c.Token == "" {
			t.Fatalf("config: %s (%v)", b, err)
		}
		if r := mc.run("not-the-password\n", "login", px.URL, "--user", "ops", "--password-stdin"); r.code != 1 || !strings.Contains(r.stderr, "meshctl: ") {
			t.Fatalf("a wrong password: %s", r)
		}
	})

	t.Run("MachinesLs", func(t *testing.T) {
		var list client.MachineList
		mc.ok(&list, "machines", "ls", "-o", "json")
		var names []string
		for _, m := range list.Items {
			names = append(names, m.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"m1", "m2"}) {
			t.Fatalf("machines ls: %v", names)
		}
		if r := mc.ok(nil, "machines", "show", "m1"); !strings.Contains(r.stdout, "State:") || !strings.Contains(r.stdout, "Why:") {
			t.Fatalf("machines show: %s", r)
		}
	})

	t.Run("PushMakesAGenerationOfTheSameContent", func(t *testing.T) {
		var before, after client.Machine
		mc.ok(&before, "machines", "show", "m2", "-o", "json")
		mc.ok(&after, "push", "m2", "-o", "json")
		if after.Generation != before.Generation+1 || after.GenerationTrigger != "push" {
			t.Fatalf("push: generation %d → %d (trigger %s); want %d, push", before.Generation, after.Generation,
				after.GenerationTrigger, before.Generation+1)
		}
	})

	t.Run("AssignRetriesA412OnAFreshRead", func(t *testing.T) {
		px.armed.Store(true)
		var as client.Assignments
		r := mc.ok(&as, "assign", "m1", "app", "-o", "json")
		if px.done.Load() != 1 {
			t.Fatal("the concurrent change was not made")
		}
		if !strings.Contains(r.stderr, "m1 changed since it was read") {
			t.Fatalf("the retry is not said: %s", r)
		}
		mods := func(as client.Assignments) []string {
			var s []string
			for _, a := range as.Assignments {
				s = append(s, a.Module)
			}
			slices.Sort(s)
			return s
		}
		if got := mods(as); !slices.Equal(got, []string{"app", "other"}) {
			t.Fatalf("after the retry: %v; want app and the other person's other", got)
		}
		var stored client.Assignments
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &stored)
		if got := mods(stored); !slices.Equal(got, []string{"app", "other"}) {
			t.Fatalf("stored: %v", got)
		}
		mc.ok(nil, "assign", "m2", "app")
		if r := mc.ok(nil, "assign", "m2", "app"); !strings.Contains(r.stdout, "already has that") {
			t.Fatalf("assigning again: %s", r)
		}
	})

	t.Run("AssignSaysAModuleHasNoBuild", func(t *testing.T) {
		// Its table said "current", and the machine stayed current with
		// nothing of it deployed.
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "nobuild"}}, 201, nil)
		r := mc.ok(nil, "assign", "m2", "nobuild")
		if !strings.Contains(r.stderr, "note: nobuild has no build yet: nothing of it is deployed until its first build") {
			t.Fatalf("assign of a module with no build: %s", r)
		}
		mc.ok(nil, "unassign", "m2", "nobuild")
	})

	t.Run("AssignSaysAGenerationThatCannotBeComposed", func(t *testing.T) {
		// m9's new generation needs a variable it does not have: nothing
		// is sent to it. The edit said only "generation N".
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "needsvar"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "needsvar", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/nv.conf", "content": "port=${var.port}\n"}]}`, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		e.Enroll("m9")
		r := mc.ok(nil, "assign", "m9", "needsvar")
		if strings.Contains(r.stderr, "no build yet") {
			t.Fatalf("a module with a build said to have none: %s", r)
		}
		if !strings.Contains(r.stderr, "note: m9's generation cannot be composed, so nothing is sent to it until that is fixed:") || !strings.Contains(r.stderr, "port") {
			t.Fatalf("assigning a module whose variable m9 lacks: %s", r)
		}
		if r := mc.ok(nil, "unassign", "m9", "needsvar"); strings.Contains(r.stderr, "cannot be composed") {
			t.Fatalf("a composable generation said not: %s", r)
		}
	})

	t.Run("BuildsUploadADirectory", func(t *testing.T) {
		dir := t.TempDir()
		files := map[string]string{"bin/run": "#!/bin/sh\necho hi\n", "share/README": "app\n"}
		for name, body := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("run", filepath.Join(dir, "bin", "app")); err != nil {
			t.Fatal(err)
		}
		manifest := filepath.Join(t.TempDir(), "manifest.json")
		if err := os.WriteFile(manifest, []byte(appManifest), 0o644); err != nil {
			t.Fatal(err)
		}
		var b client.Build
		mc.ok(&b, "builds", "upload", "app", dir, "--manifest", manifest, "--version", "1.0.0", "--commit", "c1", "-o", "json")
		if b.Module != "app" || b.Number != 1 || b.Version != "1.0.0" || b.Commit != "c1" || !strings.HasPrefix(b.Digest, "sha256:") {
			t.Fatalf("build: %+v", b)
		}
		resp, blob := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/blobs/" + b.Digest, Token: e.Admin})
		if resp.StatusCode != 200 {
			t.Fatalf("the artifact: %d", resp.StatusCode)
		}
		got := untar(t, blob)
		for name, body := range files {
			if got[name] != body {
				t.Fatalf("the artifact's %s: %q, want %q (all: %v)", name, got[name], body, got)
			}
		}
		if got["bin/app"] != "-> run" || got["bin/"] != "dir" {
			t.Fatalf("the artifact's symlink and dirs: %v", got)
		}
	})

	// The first build is current; the hosts apply it before the next.
	testwait.For(t, 20*time.Second, "both machines current with build 1", func() bool {
		var list client.MachineList
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: e.Admin}, 200, &list)
		n := 0
		for _, m := range list.Items {
			if m.State == client.MachineStateCurrent && m.Running["app"].Build == 1 {
				n++
			}
		}
		return n == 2
	})
	manifest := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(manifest, []byte(appManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	latestPlan := func(t *testing.T, build int) client.Plan {
		t.Helper()
		var ps client.PlanList
		mc.ok(&ps, "plans", "ls", "-o", "json")
		if len(ps.Items) == 0 || ps.Items[0].Build != build {
			t.Fatalf("plans ls: %+v, want the newest of build %d", ps.Items, build)
		}
		return ps.Items[0]
	}

	t.Run("PlansWatchDoneExits0", func(t *testing.T) {
		r := mc.ok(nil, "builds", "upload", "app", src, "--manifest", manifest, "--version", "2.0.0")
		p := latestPlan(t, 2)
		if !strings.Contains(r.stdout, fmt.Sprintf("Plan %d:", p.Id)) {
			t.Fatalf("the upload does not name its plan: %s", r)
		}
		w := mc.run("", "plans", "watch", strconv.Itoa(p.Id))
		if w.code != 0 || !strings.Contains(w.stdout, fmt.Sprintf("plan %d done", p.Id)) || !strings.Contains(w.stdout, "tier 1/2 (canary)") {
			t.Fatalf("plans watch of a plan that finishes: %s", w)
		}
		var done client.Plan
		mc.ok(&done, "plans", "show", strconv.Itoa(p.Id), "-o", "json")
		if done.State != client.PlanStateDone {
			t.Fatalf("plan after watch: %s", done.State)
		}
		// The same upload again (CI retrying one whose answer was lost):
		// no build 3, no second plan, and meshctl says so.
		again := mc.ok(nil, "builds", "upload", "app", src, "--manifest", manifest, "--version", "2.0.0")
		if !strings.Contains(again.stderr, "app build 2 (uploaded") || !strings.Contains(again.stderr, "already holds this upload: no new build, no new plan") {
			t.Fatalf("a repeated upload: %s", again)
		}
		if p2 := latestPlan(t, 2); p2.Id != p.Id {
			t.Fatalf("a repeated upload started plan %d", p2.Id)
		}
	})

	t.Run("PlansWatchHaltedExitsNonZero", func(t *testing.T) {
		m1.refuse.Store(3) // m1, first by name, is the canary
		mc.ok(nil, "builds", "upload", "app", src, "--manifest", manifest, "--version", "3.0.0")
		p := latestPlan(t, 3)
		w := mc.run("", "plans", "watch", strconv.Itoa(p.Id), "-o", "json")
		if w.code != 2 || !strings.Contains(w.stderr, fmt.Sprintf("plan %d halted", p.Id)) || !strings.Contains(w.stderr, "the canary says no to build 3") {
			t.Fatalf("plans watch of a plan the canary refuses: %s", w)
		}
		var halted client.Plan
		if err := json.Unmarshal([]byte(w.stdout), &halted); err != nil || halted.State != client.PlanStateHalted {
			t.Fatalf("-o json: the final plan on stdout: %v %s", err, w.stdout)
		}
		// Acting on a tier the plan is not at changes nothing (the API's
		// ?tier=); the canary is its first, as plans show says it.
		if r := mc.run("", "plans", "rollback", strconv.Itoa(p.Id), "--tier", "2"); r.code != 1 ||
			!strings.Contains(r.stderr, "has moved on since it was read (at tier 2 of 2): it is now halted at tier 1 of 2 (canary)") {
			t.Fatalf("rollback --tier 2 of a plan halted at its first: %s", r)
		}
		if r := mc.run("", "plans", "rollback", strconv.Itoa(p.Id), "--tier", "0"); r.code == 0 || !strings.Contains(r.stderr, "tiers count from 1") {
			t.Fatalf("rollback --tier 0: %s", r)
		}
		var back client.Plan
		mc.ok(&back, "plans", "rollback", strconv.Itoa(p.Id), "--tier", "1", "-o", "json")
		if back.State != client.PlanStateRolledBack {
			t.Fatalf("rollback: %s %s", back.State, back.Reason)
		}
		// Going back on a finished plan is a choice of build, from meshctl
		// too (the refusal of a done plan's rollback names it).
		if r := mc.ok(nil, "modules", "current", "app", "2"); !strings.Contains(r.stdout, "build 2 of app is current:") {
			t.Fatalf("modules current: %s", r)
		}
		if r := mc.run("", "modules", "current", "app", "two"); r.code == 0 || !strings.Contains(r.stderr, "BUILD is a build's number") {
			t.Fatalf("modules current app two: %s", r)
		}
		// Back past the current build: only with a reason, which then
		// moves the machines on newer builds back (it moved none).
		if r := mc.run("", "modules", "current", "app", "1"); r.code != 1 || !strings.Contains(r.stderr, "needs a reason (meshctl modules current app 1 --reason …)") {
			t.Fatalf("modules current app 1 without a reason: %s", r)
		}
		if r := mc.ok(nil, "modules", "current", "app", "1", "--reason", "build 2 leaks"); !strings.Contains(r.stdout, "build 1 of app is current (gone back: build 2 leaks;") {
			t.Fatalf("modules current app 1 --reason: %s", r)
		}
		mc.ok(nil, "modules", "current", "app", "2")
	})

	t.Run("TokensCreate", func(t *testing.T) {
		var tok client.JoinToken
		mc.ok(&tok, "tokens", "create", "--expires-in", "2h", "-o", "json")
		if tok.Token == "" || tok.Id == 0 || time.Until(tok.ExpiresAt) < 119*time.Minute || time.Until(tok.ExpiresAt) > 121*time.Minute {
			t.Fatalf("token: %+v", tok)
		}
		// The table shows the line to paste on the machine, and the id to
		// revoke the token by.
		if r := mc.ok(nil, "tokens", "create"); !strings.Contains(r.stdout, "mesh-host enroll --controller ") || !strings.Contains(r.stdout, "--join-token ") ||
			!strings.Contains(r.stdout, "ID") {
			t.Fatalf("tokens create gives no enrol line or id: %s", r)
		}
		// The token enrols a host.
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{
			"join_token": tok.Token, "name": "m3", "os": "linux", "arch": "amd64"}}, 201, nil)
	})

	t.Run("UsersAdd", func(t *testing.T) {
		var u client.User
		r := mc.run("a long enough password\n", "users", "add", "carol", "--role", "viewer", "--password-stdin", "-o", "json")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &u) != nil || u.Name != "carol" || u.Role != "viewer" {
			t.Fatalf("users add: %s", r)
		}
	})

	t.Run("ReleasesUploadSaysItsSchemas", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "mesh-host")
		if err := os.WriteFile(bin, []byte("a mesh-host binary"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := mc.run("", "releases", "upload", "1.5.0", bin, "--os", "linux", "--arch", "amd64")
		if r.code == 0 || !strings.Contains(r.stderr, `required flag(s) "schemas" not set`) {
			t.Fatalf("an upload without --schemas: %s", r)
		}
		r = mc.run("", "releases", "upload", "1.5.0", bin, "--os", "linux", "--arch", "amd64", "--schemas", "1,x")
		if r.code != 1 || !strings.Contains(r.stderr, `schemas: "x" is not a schema number`) {
			t.Fatalf("an upload with --schemas 1,x: %s", r)
		}
		var rel client.Release
		mc.ok(&rel, "releases", "upload", "1.5.0", bin, "--os", "linux", "--arch", "amd64", "--schemas", "2,1", "-o", "json")
		if rel.Version != "1.5.0" || rel.Schemas != "1,2" {
			t.Fatalf("the release: %+v", rel)
		}
		// Its rollout paused, resumed and cancelled from the command line
		// (it took the raw API).
		var ro client.Rollout
		mc.ok(&ro, "releases", "rollout", "1.5.0", "--canary", "1", "-o", "json")
		for _, step := range []struct{ action, want string }{{"pause", "paused"}, {"resume", "running"}, {"cancel", "cancelled"}} {
			mc.ok(&ro, "releases", step.action, "1.5.0", "-o", "json")
			if string(ro.State) != step.want {
				t.Fatalf("releases %s: the rollout is %s, want %s", step.action, ro.State, step.want)
			}
		}
		if r := mc.run("", "releases", "resume", "1.5.0"); r.code != 1 || !strings.Contains(r.stderr, "cancelled; cannot resume it") {
			t.Fatalf("resuming a cancelled rollout: %s", r)
		}
	})

	t.Run("BuildsLsAndYank", func(t *testing.T) {
		// The newest build of app is the one whose plan halted: not current.
		var list client.BuildList
		mc.ok(&list, "builds", "ls", "app", "-o", "json")
		if len(list.Items) < 2 || list.Items[0].Number < list.Items[1].Number {
			t.Fatalf("builds ls app, newest first: %+v", list.Items)
		}
		n := strconv.Itoa(list.Items[0].Number)
		if r := mc.run("", "builds", "yank", "app", n); r.code == 0 || !strings.Contains(r.stderr, "reason") {
			t.Fatalf("a yank without a reason: %s", r)
		}
		var b client.Build
		mc.ok(&b, "builds", "yank", "app", n, "--reason", "leaks descriptors", "-o", "json")
		if b.State != "yanked" || b.YankReason == nil || *b.YankReason != "leaks descriptors" {
			t.Fatalf("yanked build: %+v", b)
		}
		if r := mc.ok(nil, "builds", "ls", "app"); !strings.Contains(r.stdout, "yanked") || !strings.Contains(r.stdout, "leaks descriptors") {
			t.Fatalf("builds ls table: %s", r)
		}
		// A plan of a yanked build is made refused: a script is told so
		// by the exit status, not only by the words (it exited 0).
		if r := mc.run("", "plans", "create", "app@"+n); r.code != 2 || !strings.Contains(r.stdout, "refused") || !strings.Contains(r.stderr, "refused") {
			t.Fatalf("a plan of a yanked build: %s", r)
		}
	})

	t.Run("ProblemsAreTitleAndDetail", func(t *testing.T) {
		r := mc.run("", "machines", "show", "nosuch")
		if r.code != 1 || !strings.HasPrefix(r.stderr, "meshctl: ") || !strings.Contains(r.stderr, "nosuch") {
			t.Fatalf("a machine that is not: %s", r)
		}
		r = mc.run("", "unassign", "m2", "other")
		if r.code != 1 || !strings.Contains(r.stderr, "m2 is not assigned other") {
			t.Fatalf("unassigning what is not assigned: %s", r)
		}
		// A controller given without its scheme is told so in words.
		if r := mc.run("", "machines", "ls", "--controller", "127.0.0.1:8080"); r.code != 1 || !strings.Contains(r.stderr, "want a URL with its scheme") {
			t.Fatalf("--controller 127.0.0.1:8080: %s", r)
		}
		// The controller's base URL with the API's path is told so, not
		// answered "Not Found: Not Found".
		if r := mc.run("", "machines", "ls", "--controller", px.URL+"/api/v1"); r.code != 1 || !strings.Contains(r.stderr, "give its base URL, without /api/v1") {
			t.Fatalf("--controller …/api/v1: %s", r)
		}
		// A refused login says to check what was given, not to log in again.
		if r := mc.run("not-the-password\n", "login", px.URL, "--user", "ops", "--password-stdin"); r.code != 1 ||
			!strings.Contains(r.stderr, "check the user name and password") || strings.Contains(r.stderr, "log in again") {
			t.Fatalf("a wrong password: %s", r)
		}
		// A MESH_TOKEN that is not one: said in words, and logging in
		// again would not help while it is set.
		mc.env = append(mc.env, "MESH_TOKEN=not-a-token")
		r = mc.run("", "plans", "ls")
		if r.code != 1 || !strings.Contains(r.stderr, "this is not a token (malformed)") || !strings.Contains(r.stderr, "MESH_TOKEN is set") {
			t.Fatalf("a bad token: %s", r)
		}
	})
}

// untar reads a tar.gz into name → body ("dir" for a directory, "-> T" for
// a symlink to T).
func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out[h.Name] = "dir"
		case tar.TypeSymlink:
			out[h.Name] = "-> " + h.Linkname
		default:
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = string(body)
		}
	}
}

// TestMeshctl_HelpEverywhere: every command answers --help (exit 0, its
// usage), and cobra's completion scripts are there.
func TestMeshctl_HelpEverywhere(t *testing.T) {
	var walk func(c *cobra.Command, path []string)
	var paths [][]string
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	walk((&app{}).rootCommand(), nil)
	if len(paths) < 20 {
		t.Fatalf("only %d commands", len(paths))
	}
	for _, p := range paths {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append(slices.Clone(p), "--help"), strings.NewReader(""), &out, &errOut); code != 0 || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("meshctl %v --help: exit %d\n%s%s", p, code, out.String(), errOut.String())
		}
	}
	// An unknown word is an error everywhere, groups included: a script's
	// typo never passes as a help page.
	for _, p := range [][]string{{"frob"}, {"machines", "frob"}, {"plans", "frob"}, {"tokens", "frob"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), p, strings.NewReader(""), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), `unknown command "frob"`) {
			t.Errorf("meshctl %v: exit %d, %q; want 1 and unknown command", p, code, errOut.String())
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"completion", sh}, strings.NewReader(""), &out, &errOut); code != 0 || out.Len() < 100 {
			t.Errorf("completion %s: exit %d %s", sh, code, errOut.String())
		}
	}
}

func TestParseModuleBuild(t *testing.T) {
	for _, tc := range []struct {
		in     string
		module string
		build  int
		err    bool
	}{
		{"app", "app", 0, false},
		{"app@7", "app", 7, false},
		{"app@", "", 0, true},
		{"app@0", "", 0, true},
		{"app@x", "", 0, true},
		{"@3", "", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			m, b, err := parseModuleBuild(tc.in)
			if (err != nil) != tc.err || m != tc.module || (b == nil) != (tc.build == 0) || (b != nil && *b != tc.build) {
				t.Fatalf("%q: %q %v %v", tc.in, m, b, err)
			}
		})
	}
}

// A mistyped command's suggestion is indented by a tab, as cobra writes it,
// not by a written-out "\t".
func TestRun_SuggestionKeepsItsTab(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"machnes", "ls"}, strings.NewReader(""), &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "Did you mean this?\n\tmachines\n") {
		t.Errorf("stderr %q, want the suggestion indented by a tab", errOut.String())
	}
}

// TestWatchHead_APausedPlanSaysWhyAndHow: plans watch of a plan paused by
// itself said only "paused" and waited; it says why, and the resume that
// answers that pause (naming its tier, so a retry cannot pass another).
func TestWatchHead_APausedPlanSaysWhyAndHow(t *testing.T) {
	p := &client.Plan{Id: 7, Build: 3, Module: "web", State: client.PlanStatePaused, Tier: 0,
		Reason: "paused: untried: tier 1 of 2 (canary) took build 3 on none of its machines: resume to go on to tier 2 of 2 untried, or cancel (m1: pinned to build 2)"}
	want := "(build 3 of web): paused: untried: tier 1 of 2 (canary) took build 3 on none of its machines: resume to go on to tier 2 of 2 untried, or cancel (m1: pinned to build 2)" +
		" — waiting for a person: meshctl plans resume 7 --tier 1, or cancel"
	if got := watchHead(p); got != want {
		t.Errorf("paused by itself:\n got %s\nwant %s", got, want)
	}
	p.Reason, p.Tier = "paused by user:carol", 1
	if got := watchHead(p); got != "(build 3 of web): paused by user:carol — waiting for a person: meshctl plans resume 7 --tier 2, or cancel" {
		t.Errorf("paused by a person: %s", got)
	}
	p.State = client.PlanStateRunning
	if got := watchHead(p); got != "(build 3 of web): running" {
		t.Errorf("running: %s", got)
	}
}

// TestPinnedAsideWords: a plan's machines pinned by a person are said, on
// plans show and when plans watch ends done (a done plan's build read as
// every machine's).
func TestPinnedAsideWords(t *testing.T) {
	p := &client.Plan{}
	if w := pinnedAsideWords(p); w != "" {
		t.Fatalf("none: %q", w)
	}
	p.PinnedAside = append(p.PinnedAside, struct {
		Build   int64  `json:"build"`
		Machine string `json:"machine"`
		Reason  string `json:"reason"`
	}{Build: 1, Machine: "m2", Reason: "hold for the db migration"}, struct {
		Build   int64  `json:"build"`
		Machine string `json:"machine"`
		Reason  string `json:"reason"`
	}{Build: 3, Machine: "m4"})
	if w := pinnedAsideWords(p); w != "m2 at build 1 (hold for the db migration), m4 at build 3" {
		t.Fatalf("%q", w)
	}
}
