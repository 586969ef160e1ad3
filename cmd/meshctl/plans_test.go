package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/client"
	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
)

// hostPoll is one poll of a host as hostVersion advertising schemas: the
// declaration it got (nil on 304) and the send that carried it.
func hostPoll(t *testing.T, e *ctltest.Env, token, hostVersion, schemas string, known int64) (*models.DeclarationPayload, string) {
	t.Helper()
	h := map[string]string{"X-Mesh-Host-Version": hostVersion, "X-Mesh-Schema": schemas, "If-None-Match": fmt.Sprintf(`"%d"`, known)}
	resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: token, Header: h})
	if resp.StatusCode != 200 {
		t.Fatalf("poll: %d %s", resp.StatusCode, b)
	}
	var env models.Envelope
	var d models.DeclarationPayload
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(env.Payload, &d); err != nil {
		t.Fatal(err)
	}
	return &d, resp.Header.Get("X-Mesh-Send")
}

// TestMeshctl_PlansCreateHostReleaseFirst: `meshctl plans create
// MODULE@BUILD --host-release-first VERSION` makes a plan whose host step
// is shown (the rollout and each machine in it); an unknown release is
// refused saying so; `plans watch` shows the host step beside the tiers
// and ends 0 once the plan is done.
func TestMeshctl_PlansCreateHostReleaseFirst(t *testing.T) {
	mc := buildMeshctl(t)
	e := ctltest.Start(t, store.SQLite, ctltest.Options{RolloutEvery: 100 * time.Millisecond})
	e.AddUser("ops", "admin")
	if r := mc.run("password-of-ops\n", "login", e.URL, "--user", "ops", "--password-stdin"); r.code != 0 {
		t.Fatalf("login: %s", r)
	}
	en := e.Enroll("m1")
	d, send := hostPoll(t, e, en.Token, "1.0.0", "1", 0)
	report := func(body map[string]any) {
		t.Helper()
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: body}, 201, nil)
	}
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied"})
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
	if resp, b := e.Upload(e.Admin, "web", `{"resources": [{"name": "web", "kind": "service", "command": ["/opt/web/run"]}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": fmt.Sprintf(`"%d"`, d.Generation)}, Body: map[string]any{"assignments": []map[string]any{{"module": "web"}}}}, 200, nil)
	d, send = hostPoll(t, e, en.Token, "1.0.0", "1", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied", "running": map[string]any{"web": map[string]any{"build": 1}}})
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	cert := `{"resources": [{"name": "web", "kind": "service", "command": ["/opt/web/run"]},
	  {"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh"], "path": "/etc/web/chain.pem", "key_path": "/etc/web/key.pem"}]}`
	if resp, b := e.Upload(e.Admin, "web", cert, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload of build 2: %d %s", resp.StatusCode, b)
	}
	var auto client.PlanList
	mc.ok(&auto, "plans", "ls", "-o", "json")
	mc.ok(nil, "plans", "cancel", strconv.Itoa(auto.Items[0].Id))

	if r := mc.run("", "plans", "create", "web@2", "--host-release-first", "9.9.9"); r.code != 1 || !strings.Contains(r.stderr, "host_release_first: no host release 9.9.9") {
		t.Fatalf("an unknown release: %s", r)
	}
	r := mc.ok(nil, "plans", "create", "web@2", "--host-release-first", "1.5.0")
	if !strings.Contains(r.stdout, "Host step:") || !strings.Contains(r.stdout, "1.5.0 first: rollout running; m1 upgrading") {
		t.Fatalf("plans create: %s", r)
	}
	var p client.Plan
	var ps client.PlanList
	mc.ok(&ps, "plans", "ls", "-o", "json")
	mc.ok(&p, "plans", "show", strconv.Itoa(ps.Items[0].Id), "-o", "json")
	if p.HostRelease != "1.5.0" || p.HostStep == nil || p.HostStep.Plan != p.Id || p.HostStep.State != "running" {
		t.Fatalf("plans show -o json: %+v", p)
	}

	// The host upgrades (its trial polls as 1.5.0, decoding 1,2) and then
	// applies build 2 in schema 2: the plan is done.
	d, send = hostPoll(t, e, en.Token, "1.0.0", "1", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied", "running": map[string]any{"web": map[string]any{"build": 1}}})
	d, send = hostPoll(t, e, en.Token, "1.5.0", "1,2", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "upgraded", "host_version": "1.5.0",
		"running": map[string]any{"web": map[string]any{"build": 1}}})
	d, send = hostPoll(t, e, en.Token, "1.5.0", "1,2", d.Generation)
	if d.Schema != 2 || len(d.Resources) != 2 {
		t.Fatalf("after the host step: %+v", d)
	}
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied", "host_version": "1.5.0",
		"running": map[string]any{"web": map[string]any{"build": 2}}})
	w := mc.run("", "plans", "watch", strconv.Itoa(p.Id))
	if w.code != 0 || !strings.Contains(w.stdout, "host 1.5.0") || !strings.Contains(w.stdout, fmt.Sprintf("plan %d done", p.Id)) {
		t.Fatalf("plans watch: %s", w)
	}
}

// TestShowPlan_AHaltedPlanIsNotFinished: a halted plan has stopped, not
// finished — it may be resumed or rolled back — and `plans show` says when
// it halted, not that it finished.
func TestShowPlan_AHaltedPlanIsNotFinished(t *testing.T) {
	at := time.Now().Add(-5 * time.Second)
	for _, tc := range []struct {
		state     client.PlanState
		want, not string
	}{
		{client.PlanStateHalted, "Halted:", "Finished:"},
		{client.PlanStateDone, "Finished:", "Halted:"},
	} {
		var out bytes.Buffer
		a := &app{out: &out, errOut: &out}
		if err := a.showPlan(&client.Plan{Id: 1, Module: "web", Build: 2, State: tc.state, FinishedAt: &at, CreatedAt: at}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) || strings.Contains(out.String(), tc.not) {
			t.Fatalf("a %s plan:\n%s", tc.state, out.String())
		}
	}
}

// TestShowPlan_AStepMadeIsNotSaidSent: a step whose generation the plan
// made says that, and that it awaits its host's report, as the dashboard
// does: "sent" claimed a send that its host, stopped, never polled for.
func TestShowPlan_AStepMadeIsNotSaidSent(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, errOut: &out}
	p := &client.Plan{Id: 8, Module: "web", Build: 3, State: client.PlanStateRunning, CreatedAt: time.Now(),
		Steps: []client.PlanStep{{Machine: "op-4", Tier: 0, State: client.PlanStepStateSent, Generation: 5}}}
	if err := a.showPlan(p); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "awaiting") || !strings.Contains(s, "generation 5 made for it, awaiting its host's report") || strings.Contains(s, " sent ") {
		t.Fatalf("a made step:\n%s", s)
	}
}

// TestMachineWords_HealthAsOfWhenItWasSaid: a current machine whose check
// fails within the grace says so in its why (it read "applied generation
// N, the latest" only), and an offline machine's health is said with when
// its host last reported it, not as a fact of now.
func TestMachineWords_HealthAsOfWhenItWasSaid(t *testing.T) {
	since := time.Now().Add(-20 * time.Second)
	m := client.Machine{Name: "m1", State: client.MachineStateCurrent, AppliedGeneration: 4, Generation: 4}
	m.Health.State, m.Health.Check, m.Health.Detail, m.Health.Since, m.Health.CheckedAt = client.Failing, "web.svc", "connection refused", &since, &since
	if w := why(&m); !strings.Contains(w, "check web.svc failing since") || !strings.Contains(w, "within the grace") {
		t.Fatalf("why: %s", w)
	}
	old := time.Now().Add(-time.Hour)
	m = client.Machine{Name: "m2", State: client.MachineStateOffline, LastSeen: &old, CreatedAt: old.Add(-time.Hour)}
	m.Health.State, m.Health.CheckedAt = client.Passing, &old
	if h := healthColumn(&m); !strings.HasPrefix(h, "passing (") {
		t.Fatalf("an offline machine's health column: %q", h)
	}
	// A revoked machine's too: nothing its host says is heard (it read
	// "passing", where /metrics counts it unknown).
	m.State = client.MachineStateRevoked
	if h := healthColumn(&m); !strings.HasPrefix(h, "passing (") {
		t.Fatalf("a revoked machine's health column: %q", h)
	}
}

// TestMachineWords_BehindAsTheControllerSaysIt: a behind machine's why is
// the controller's words when it gives them (it read what was sent of the
// generation: sent and awaiting the report, or not sent yet), where
// meshctl said "not applied yet" of both.
func TestMachineWords_BehindAsTheControllerSaysIt(t *testing.T) {
	seen := time.Now().Add(-5 * time.Second)
	m := client.Machine{Name: "m1", State: client.MachineStateBehind, AppliedGeneration: 3, Generation: 4, LastSeen: &seen,
		CreatedAt: seen.Add(-time.Hour), GenerationAt: seen}
	m.StateWords = &struct {
		Badge string `json:"badge"`
		Since string `json:"since"`
	}{"behind by 1 generation(s)", "at generation 4, made 2026-12-06 09:52:15Z (5s ago, variables), 3 the last it finished; sent 3s ago by ctl-1a2b3c, no report yet"}
	if w := why(&m); w != "behind by 1 generation(s) at generation 4, made 2026-12-06 09:52:15Z (5s ago, variables), 3 the last it finished; sent 3s ago by ctl-1a2b3c, no report yet" {
		t.Fatalf("why: %s", w)
	}
	m.StateWords = nil // an older controller: meshctl's own words
	if w := why(&m); !strings.Contains(w, "generation 4 not applied yet") {
		t.Fatalf("why without the controller's words: %s", w)
	}
}

// TestMeshctl_PlansCreateHostReleaseFirstAfterTheUploadsOwnPlan follows
// the README in its order: a schema-2 build uploaded (which makes a plan
// by itself, halted at once on a host that decodes only schema 1), then
// `meshctl plans create web@2 --host-release-first 1.5.0`, with no cancel
// between (the README says none). Once the plan made by hand made build 2
// current, the upload's plan stayed halted for good, a rollback offered.
func TestMeshctl_PlansCreateHostReleaseFirstAfterTheUploadsOwnPlan(t *testing.T) {
	mc := buildMeshctl(t)
	e := ctltest.Start(t, store.SQLite, ctltest.Options{RolloutEvery: 100 * time.Millisecond})
	e.AddUser("ops", "admin")
	if r := mc.run("password-of-ops\n", "login", e.URL, "--user", "ops", "--password-stdin"); r.code != 0 {
		t.Fatalf("login: %s", r)
	}
	en := e.Enroll("m1")
	d, send := hostPoll(t, e, en.Token, "1.0.0", "1", 0)
	report := func(body map[string]any) {
		t.Helper()
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: body}, 201, nil)
	}
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied"})
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
	if resp, b := e.Upload(e.Admin, "web", `{"resources": [{"name": "web", "kind": "service", "command": ["/opt/web/run"]}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": fmt.Sprintf(`"%d"`, d.Generation)}, Body: map[string]any{"assignments": []map[string]any{{"module": "web"}}}}, 200, nil)
	d, send = hostPoll(t, e, en.Token, "1.0.0", "1", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied", "running": map[string]any{"web": map[string]any{"build": 1}}})
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	cert := `{"resources": [{"name": "web", "kind": "service", "command": ["/opt/web/run"]},
	  {"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh"], "path": "/etc/web/chain.pem", "key_path": "/etc/web/key.pem"}]}`
	if resp, b := e.Upload(e.Admin, "web", cert, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload of build 2: %d %s", resp.StatusCode, b)
	}
	mc.ok(nil, "plans", "create", "web@2", "--host-release-first", "1.5.0")
	var ps client.PlanList
	mc.ok(&ps, "plans", "ls", "-o", "json")
	byHand := ps.Items[0].Id

	d, send = hostPoll(t, e, en.Token, "1.0.0", "1", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied", "running": map[string]any{"web": map[string]any{"build": 1}}})
	d, send = hostPoll(t, e, en.Token, "1.5.0", "1,2", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "upgraded", "host_version": "1.5.0",
		"running": map[string]any{"web": map[string]any{"build": 1}}})
	d, send = hostPoll(t, e, en.Token, "1.5.0", "1,2", d.Generation)
	report(map[string]any{"send": send, "generation": d.Generation, "outcome": "applied", "host_version": "1.5.0",
		"running": map[string]any{"web": map[string]any{"build": 2}}})
	if w := mc.run("", "plans", "watch", strconv.Itoa(byHand)); w.code != 0 {
		t.Fatalf("plans watch %d: %s", byHand, w)
	}
	mc.ok(&ps, "plans", "ls", "-o", "json")
	for _, p := range ps.Items {
		if p.Id != byHand && p.Build == 2 && (p.State == "halted" || p.State == "running" || p.State == "paused") {
			t.Errorf("plan %d of build 2 (the upload's) is %s (%s) after plan %d made build 2 current", p.Id, p.State, p.Reason, byHand)
		}
	}
}
