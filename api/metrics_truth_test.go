package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
)

// TestMetrics_ACancelledHaltedTierIsNotCompleted: a plan's only tier
// halts (its machine failed the build); the histogram says one tier
// halted. The operator then cancels the halted plan. The failed step, whose
// host never ran the build, is withdrawn — and the tier, whose every step
// now has a finished_at and none is "failed", was counted as completed,
// the halted one gone: a tier that never completed shown as completed, and
// a histogram's count going down.
func TestMetrics_ACancelledHaltedTierIsNotCompleted(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.Ctl.Server.MetricsMaxAge = time.Millisecond
		const app = `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "v\n"}]}`
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "app"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "app", app, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		m := e.Enroll("m1")
		send, gen := sendPoll(t, e, m.Token, 0)
		report(e, m.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "app"}}}}, 200, nil)
		send, gen = sendPoll(t, e, m.Token, gen)
		report(e, m.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied",
			"running": map[string]any{"app": map[string]any{"build": 1}}})
		if resp, b := e.Upload(e.Admin, "app", app, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload 2: %d %s", resp.StatusCode, b)
		}
		// The plan's step: the host fails build 2.
		send, gen = sendPoll(t, e, m.Token, gen)
		report(e, m.Token, map[string]any{"send": send, "generation": gen, "outcome": "failed", "reason": "exit 1",
			"running": map[string]any{"app": map[string]any{"build": 1}}})
		var plans struct {
			Items []struct {
				ID    int64  `json:"id"`
				State string `json:"state"`
			} `json:"items"`
		}
		waitFor(t, 10*time.Second, func() bool {
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: e.Admin}, 200, &plans)
			return len(plans.Items) == 1 && plans.Items[0].State == models.PlanHalted
		})
		const halted, completed = `mesh_plan_tier_duration_seconds_count{module="app",outcome="halted"}`,
			`mesh_plan_tier_duration_seconds_count{module="app",outcome="completed"}`
		got := scrape(t, e)
		if got[halted] != 1 || got[completed] != 0 {
			t.Fatalf("halted plan: halted %v, completed %v; want 1, 0", got[halted], got[completed])
		}

		// Cancelled: the tier halted; it did not complete.
		e.JSON(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/plans/%d/cancel", plans.Items[0].ID), Token: e.Admin}, 200, nil)
		var steps struct {
			Steps []struct {
				Machine string `json:"machine"`
				State   string `json:"state"`
			} `json:"steps"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: fmt.Sprintf("/api/v1/plans/%d", plans.Items[0].ID), Token: e.Admin}, 200, &steps)
		got = scrape(t, e)
		if got[halted] != 1 || got[completed] != 0 {
			t.Fatalf("after the halted plan was cancelled (steps %+v): halted %v, completed %v; want 1, 0 — the tier never completed",
				steps.Steps, got[halted], got[completed])
		}
	})
}

// TestMetrics_ReplicasAgreeOnTiersAfterAModuleIsDeleted: two instances on
// one PostgreSQL. A plan of module app completed its tier long ago; the
// instance that was scraped then folded it for good. The module is then
// deleted (with its plans). The instance that folded it kept exporting
// app's completed tier for as long as it ran; the other, scraped for the
// first time then, exported none: two replicas, two fleets — and a
// restart changed what the first one said.
func TestMetrics_ReplicasAgreeOnTiersAfterAModuleIsDeleted(t *testing.T) {
	a, b := appTierFoldedThenDeleted(t)
	ga, gb := scrape(t, a), scrape(t, b)
	if ga[completedAppTiers] != gb[completedAppTiers] {
		t.Fatalf("after module app was deleted: instance a says %s = %v, instance b says %v: the replicas report different fleets",
			completedAppTiers, ga[completedAppTiers], gb[completedAppTiers])
	}
}

// TestMetrics_HubMachinesForgetsADeletedMachineOnEveryInstance: two
// instances on one PostgreSQL, m1 enrolled through b. m1 is deleted
// through a. a's mesh_hub_machines fell to 0; b's stayed 1 — even after a
// full reload of the store (what its periodic resync does): the help text
// says "Machines this instance's hub knows (all of them, once it has
// loaded)", and the store has none.
func TestMetrics_HubMachinesForgetsADeletedMachineOnEveryInstance(t *testing.T) {
	a, b, _ := twoInstances(t)
	const hub = "mesh_hub_machines"
	if na, nb := scrape(t, a)[hub], scrape(t, b)[hub]; na != 1 || nb != 1 {
		t.Fatalf("before: a %v, b %v; want 1, 1", na, nb)
	}
	a.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m1", Token: a.Admin}, 204, nil)
	// b re-reads every machine, as its resync does every 30 s.
	if err := b.Ctl.Hub.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if na, nb := scrape(t, a)[hub], scrape(t, b)[hub]; na != 0 || nb != 0 {
		t.Fatalf("after m1 was deleted through a and b resynced: %s a %v, b %v; want 0, 0 (the store has no machine)", hub, na, nb)
	}
}

// TestInstances_ALiveInstanceIsNeverCutFromTheList: every start of an
// instance writes a row of its own, never removed, and the list is one
// page, newest first. A replica that crash-loops (or a fleet restarted
// often) writes 500 newer rows, all stopped; the instance serving now —
// the one answering this very request — is then cut from the list at its
// largest page (meshctl instances asks for 500), and from the dashboard's
// 100: an operator was shown no serving instance at all. The live ones
// come first.
func TestInstances_ALiveInstanceIsNeverCutFromTheList(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		self := e.Ctl.Server.Instance
		// This instance started an hour ago (its heartbeats go on); a
		// crash-looping replica started 500 times since, each run a minute
		// or less.
		started := time.Now().Add(-time.Hour)
		if err := e.Ctl.Store.DB().Exec("UPDATE instances SET started_at = ? WHERE id = ?", started, self).Error; err != nil {
			t.Fatal(err)
		}
		rows := make([]models.Instance, 500)
		for i := range rows {
			at := started.Add(time.Duration(i+1) * 7 * time.Second)
			rows[i] = models.Instance{ID: fmt.Sprintf("crashloop-%03d", i), Version: "1.0.0", State: models.InstanceStopped,
				StartedAt: at, HeartbeatAt: at}
		}
		if err := e.Ctl.Store.DB().CreateInBatches(rows, 100).Error; err != nil {
			t.Fatal(err)
		}
		var list struct {
			Items []models.Instance `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/instances?limit=500", Token: e.Admin}, 200, &list)
		serving := 0
		for _, i := range list.Items {
			if i.ID == self {
				serving++
			}
		}
		if serving != 1 {
			t.Fatalf("GET /api/v1/instances?limit=500: %d items, the serving instance %s among them %d times; want it listed", len(list.Items), self, serving)
		}
	})
}

// appTierFoldedThenDeleted: two instances on one PostgreSQL; a plan of
// module app completed its tier an hour ago, and instance a, scraped, has
// folded it for good; then the machine and the module are deleted (the
// plan goes with the module).
func appTierFoldedThenDeleted(t *testing.T) (a, b *ctltest.Env) {
	t.Helper()
	a, b, m := twoInstances(t)
	for _, e := range []*ctltest.Env{a, b} {
		e.Ctl.Server.MetricsMaxAge = time.Millisecond
	}
	const app = `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "v\n"}]}`
	a.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: a.Admin, Body: map[string]any{"name": "app"}}, 201, nil)
	if resp, body := a.Upload(a.Admin, "app", app, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	send, gen := sendPoll(t, b, m.Token, 0)
	report(b, m.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
	a.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: a.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "app"}}}}, 200, nil)
	send, gen = sendPoll(t, b, m.Token, gen)
	report(b, m.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied",
		"running": map[string]any{"app": map[string]any{"build": 1}}})
	if resp, body := a.Upload(a.Admin, "app", app, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload 2: %d %s", resp.StatusCode, body)
	}
	send, gen = sendPoll(t, b, m.Token, gen)
	report(b, m.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied",
		"running": map[string]any{"app": map[string]any{"build": 2}}})
	var plans struct {
		Items []struct{ State string } `json:"items"`
	}
	waitFor(t, 10*time.Second, func() bool {
		a.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: a.Admin}, 200, &plans)
		return len(plans.Items) == 1 && plans.Items[0].State == models.PlanDone
	})
	// It finished an hour ago: past the fold.
	if err := a.Ctl.Store.DB().Exec("UPDATE plans SET finished_at = ?", time.Now().Add(-time.Hour)).Error; err != nil {
		t.Fatal(err)
	}
	if n := scrape(t, a)[completedAppTiers]; n != 1 {
		t.Fatalf("a: %s = %v, want 1", completedAppTiers, n)
	}

	// The machine and the module deleted: the plan goes with the module.
	a.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m1", Token: a.Admin}, 204, nil)
	a.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/modules/app", Token: a.Admin}, 204, nil)
	return a, b
}

// completedAppTiers is the count of module app's completed tiers.
const completedAppTiers = `mesh_plan_tier_duration_seconds_count{module="app",outcome="completed"}`
