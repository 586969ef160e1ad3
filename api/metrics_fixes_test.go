package api_test

import (
	"fmt"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
)

// TestInstances_ASecondServingReplicaIsListed: store.Instances ordered by
// a clause.Expr, which gorm's Order ignores: the query had no ORDER BY at
// all (SELECT * FROM instances LIMIT n), so the list was in the store's
// row order, neither live-first nor newest-first. A replica crash-looped
// 500 times (stopped rows), then a second replica started and serves: at
// meshctl's page of 500 it is cut, and the list starts with the oldest
// rows.
func TestInstances_ASecondServingReplicaIsListed(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		self := e.Ctl.Server.Instance
		started := time.Now().Add(-time.Hour)
		rows := make([]models.Instance, 500)
		for i := range rows {
			at := started.Add(time.Duration(i+1) * 7 * time.Second)
			rows[i] = models.Instance{ID: fmt.Sprintf("crashloop-%03d", i), Version: "1.0.0", State: models.InstanceStopped,
				StartedAt: at, HeartbeatAt: at}
		}
		if err := e.Ctl.Store.DB().CreateInBatches(rows, 100).Error; err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if err := e.Ctl.Store.DB().Create(&models.Instance{ID: "replica-b", Version: "1.0.0", State: models.InstanceServing,
			StartedAt: now, HeartbeatAt: now}).Error; err != nil {
			t.Fatal(err)
		}
		var list struct {
			Items []models.Instance `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/instances?limit=500", Token: e.Admin}, 200, &list)
		found := map[string]bool{}
		for _, i := range list.Items {
			found[i.ID] = true
		}
		if !found[self] || !found["replica-b"] {
			t.Fatalf("GET /api/v1/instances?limit=500: %d items; serving %s listed %v, serving replica-b listed %v; first three %s, %s, %s",
				len(list.Items), self, found[self], found["replica-b"], list.Items[0].ID, list.Items[1].ID, list.Items[2].ID)
		}
	})
}

// TestMetrics_ARunningTierWithADeletedMachineIsNotHalted: a plan's only
// tier holds m1 and m2; m1 has been sent the build and not yet reported.
// m2 is deleted: its step is withdrawn. The plan is still running (m1 may
// apply any moment), yet the histogram counts the tier as ended,
// "halted" — README: halted is "a failure, or the plan ended before its
// steps applied"; neither happened. When m1 then applies, the plan is
// done, the tier moved to "completed", and the halted count went down.
// Only a plan that ended (not done) makes its withdrawn steps a halt.
func TestMetrics_ARunningTierWithADeletedMachineIsNotHalted(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.Ctl.Server.MetricsMaxAge = time.Millisecond
		const app = `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "v\n"}]}`
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "app",
			"tiers": []map[string]any{{"machines": 2}}}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "app", app, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		tokens, gens := map[string]string{}, map[string]int64{}
		for _, n := range []string{"m1", "m2"} {
			m := e.Enroll(n)
			tokens[n] = m.Token
			send, gen := sendPoll(t, e, m.Token, 0)
			report(e, m.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + n + "/assignments", Token: e.Admin,
				Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "app"}}}}, 200, nil)
			send, gen = sendPoll(t, e, m.Token, gen)
			report(e, m.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied",
				"running": map[string]any{"app": map[string]any{"build": 1}}})
			gens[n] = gen
		}
		if resp, b := e.Upload(e.Admin, "app", app, []byte("tree 2"), ""); resp.StatusCode != 201 {
			t.Fatalf("upload 2: %d %s", resp.StatusCode, b)
		}
		// m1 is sent build 2 (its step reached), not yet reported.
		send1, gen1 := sendPoll(t, e, tokens["m1"], gens["m1"])
		var plans struct {
			Items []struct {
				ID    int64  `json:"id"`
				State string `json:"state"`
			} `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: e.Admin}, 200, &plans)
		if len(plans.Items) != 1 || plans.Items[0].State != models.PlanRunning {
			t.Fatalf("plans: %+v", plans)
		}
		e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m2", Token: e.Admin}, 204, nil)
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: e.Admin}, 200, &plans)
		const halted, completed = `mesh_plan_tier_duration_seconds_count{module="app",outcome="halted"}`,
			`mesh_plan_tier_duration_seconds_count{module="app",outcome="completed"}`
		got := scrape(t, e)
		before := got[halted]
		if got[halted] != 0 {
			t.Errorf("plan %s (m1 sent build 2, m2 deleted): halted %v, completed %v; want 0, 0 — the tier is still running",
				plans.Items[0].State, got[halted], got[completed])
		}
		report(e, tokens["m1"], map[string]any{"send": send1, "generation": gen1, "outcome": "applied",
			"running": map[string]any{"app": map[string]any{"build": 2}}})
		waitFor(t, 10*time.Second, func() bool {
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: e.Admin}, 200, &plans)
			return plans.Items[0].State == models.PlanDone
		})
		got = scrape(t, e)
		if got[halted] < before {
			t.Errorf("after the plan was done: halted count went from %v to %v (completed %v): a histogram's count going down", before, got[halted], got[completed])
		}
	})
}

// TestMetrics_AModuleDeletedAndMadeAgainDropsItsFoldedTiers: as
// TestMetrics_ReplicasAgreeOnTiersAfterAModuleIsDeleted, but the operator
// makes module app again (same name) before the next scrape — a script's
// "delete, then create" is seconds apart, scrapes 15–60 s. The folded
// tiers are dropped only for names missing from the module list, and
// "app" was in it: instance a exported the deleted module's completed
// tier for as long as it ran, instance b none. They are kept by the
// module's id.
func TestMetrics_AModuleDeletedAndMadeAgainDropsItsFoldedTiers(t *testing.T) {
	a, b := appTierFoldedThenDeleted(t)
	// Made again before the next scrape: a new module, no plans.
	a.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: a.Admin, Body: map[string]any{"name": "app"}}, 201, nil)
	ga, gb := scrape(t, a), scrape(t, b)
	if ga[completedAppTiers] != gb[completedAppTiers] {
		t.Fatalf("after module app was deleted and made again (no plan of it in the store): instance a says %s = %v, instance b says %v",
			completedAppTiers, ga[completedAppTiers], gb[completedAppTiers])
	}
}
