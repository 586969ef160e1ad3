package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/testwait"
)

// pollAs is a host's poll as hostVersion advertising schemas.
func pollAs(e *ctltest.Env, token, hostVersion, schemas string, known int64) poll {
	e.T.Helper()
	h := map[string]string{"X-Mesh-Host-Version": hostVersion, "X-Mesh-Schema": schemas}
	if known > 0 {
		h["If-None-Match"] = fmt.Sprintf(`"%d"`, known)
	}
	resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: token, Header: h})
	return poll{status: resp.StatusCode, etag: resp.Header.Get("ETag"), send: resp.Header.Get("X-Mesh-Send"), body: b}
}

// TestPlans_HostReleaseFirst over HTTP: a plan of a build that needs
// schema 2, told to roll out host release 1.5.0 first, starts that rollout
// to its machine whose host decodes only 1 and reaches it with nothing
// until the rollout is done (the plan view shows the host step and its
// state); the upgraded host then gets the build in schema 2 and the plan
// finishes. An unknown release is 400, saying which field and why.
func TestPlans_HostReleaseFirst(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := pollAs(e, en.Token, "1.0.0", "1", 0)
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied"})
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "web", `{"resources": [{"name": "web", "kind": "service", "command": ["/opt/web/run"]}]}`, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "web"}}}}, 200, nil)
		p = pollAs(e, en.Token, "1.0.0", "1", 1)
		report(e, en.Token, map[string]any{"send": p.send, "generation": 2, "outcome": "applied", "running": map[string]any{"web": map[string]any{"build": 1}}})
		if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
			t.Fatalf("release: %d %s", resp.StatusCode, b)
		}
		// Build 2 needs schema 2; the plan its upload made is cancelled,
		// so the plan by hand is the only one.
		if resp, b := e.Upload(e.Admin, "web", certModule, []byte("tree"), ""); resp.StatusCode != 201 {
			t.Fatalf("upload of build 2: %d %s", resp.StatusCode, b)
		}
		var made struct{ Items []models.PlanView }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: e.Admin}, 200, &made)
		if len(made.Items) != 1 || made.Items[0].Build != 2 || made.Items[0].HostStep != nil {
			t.Fatalf("plans after the upload: %+v", made.Items)
		}
		// ?tier= is the tier its caller read; not a tier is a 400.
		if resp, b := e.Do(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/plans/%d/cancel?tier=first", made.Items[0].ID), Token: e.Admin}); resp.StatusCode != 400 ||
			!strings.Contains(string(b), "tier") {
			t.Fatalf("cancel ?tier=first: %d %s", resp.StatusCode, b)
		}
		e.JSON(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/plans/%d/cancel?tier=0", made.Items[0].ID), Token: e.Admin}, 200, nil)

		resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/plans", Token: e.Admin,
			Body: map[string]any{"module": "web", "build": 2, "host_release_first": "9.9.9"}})
		var prob struct{ Detail string }
		_ = json.Unmarshal(b, &prob)
		if resp.StatusCode != 400 || prob.Detail != "host_release_first: no host release 9.9.9" {
			t.Fatalf("unknown release: %d %s", resp.StatusCode, b)
		}

		var v models.PlanView
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/plans", Token: e.Admin,
			Body: map[string]any{"module": "web", "build": 2, "host_release_first": "1.5.0"}}, 201, &v)
		if v.State != models.PlanRunning || v.HostRelease != "1.5.0" || v.HostStep == nil || v.HostStep.PlanID != v.ID ||
			v.HostStep.State != models.RolloutRunning || len(v.HostStep.Machines) != 1 || v.HostStep.Machines[0].State != models.UpgradeUpgrading {
			t.Fatalf("plan = %+v, host step %+v", v, v.HostStep)
		}
		if v.Steps[0].State != models.StepPending {
			t.Fatalf("m1 reached before the host step ended: %+v", v.Steps[0])
		}

		// The host is told to upgrade: its declaration names 1.5.0 and
		// carries none of build 2.
		p = pollAs(e, en.Token, "1.0.0", "1", 2)
		d := verify(t, en, p.body)
		if p.status != 200 || d.Host == nil || d.Host.Version != "1.5.0" || len(d.Resources) != 1 || d.Resources[0].Build != 1 {
			t.Fatalf("upgrade declaration: %d %+v", p.status, d)
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": d.Generation, "outcome": "applied", "running": map[string]any{"web": map[string]any{"build": 1}}})

		// Its trial polls as 1.5.0 decoding 1,2 and reports upgraded.
		p = pollAs(e, en.Token, "1.5.0", "1,2", d.Generation)
		up2 := verify(t, en, p.body)
		report(e, en.Token, map[string]any{"send": p.send, "generation": up2.Generation, "outcome": "upgraded", "host_version": "1.5.0",
			"running": map[string]any{"web": map[string]any{"build": 1}}})
		path := fmt.Sprintf("/api/v1/plans/%d", v.ID)
		testwait.For(t, 15*time.Second, "the first tier after the host step", func() bool {
			e.JSON(ctltest.Request{Method: "GET", Path: path, Token: e.Admin}, 200, &v)
			return v.Steps[0].State == models.StepSent
		})
		if v.HostStep.State != models.RolloutDone || v.HostStep.Machines[0].State != models.UpgradeUpgraded {
			t.Fatalf("host step = %+v", v.HostStep)
		}

		// Build 2 in schema 2, applied: the plan is done.
		p = pollAs(e, en.Token, "1.5.0", "1,2", up2.Generation)
		d = verify(t, en, p.body)
		if p.status != 200 || d.Schema != 2 || d.Generation != v.Steps[0].Generation || len(d.Resources) != 2 {
			t.Fatalf("the step's declaration: %d %+v (step %+v)", p.status, d, v.Steps[0])
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": d.Generation, "outcome": "applied", "host_version": "1.5.0",
			"running": map[string]any{"web": map[string]any{"build": 2}}})
		testwait.For(t, 15*time.Second, "the plan done", func() bool {
			e.JSON(ctltest.Request{Method: "GET", Path: path, Token: e.Admin}, 200, &v)
			return v.State == models.PlanDone
		})
		if !strings.Contains(v.TierWords(), "done") {
			t.Fatalf("plan = %+v", v)
		}
	})
}
