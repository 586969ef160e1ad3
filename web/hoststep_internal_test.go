package web

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"mesh/models"
)

// TestPlanPage_HostStep: a plan told to roll out a host release first
// shows its host step — the rollout's state, each machine's upgrade — and,
// while the step runs, says the plan is there rather than at tier 1; once
// the step is done the tiers' words come back. A plan with no host step
// shows none.
func TestPlanPage_HostStep(t *testing.T) {
	now := time.Now()
	plan := func(hostState, m1 string) *models.PlanView {
		return &models.PlanView{
			Plan:  models.Plan{ID: 7, Module: "web", Build: 2, State: models.PlanRunning, CreatedBy: "user:ops", CreatedAt: now, HostRelease: "1.5.0"},
			Steps: []models.PlanStep{{Machine: "m1", Tier: 0, State: models.StepPending}},
			HostStep: &models.RolloutView{
				Rollout:  models.Rollout{ID: 3, Version: "1.5.0", State: hostState, PlanID: 7, CreatedAt: now},
				Machines: []models.RolloutMachine{{Machine: "m1", State: m1, Previous: "1.4.0", StartedAt: &now}},
			},
		}
	}
	render := func(d PlanDetail) string {
		var buf bytes.Buffer
		if err := PlanProgress(Page{}, d).Render(context.Background(), &buf); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}

	d := planDetail(plan(models.RolloutRunning, models.UpgradeUpgrading), false)
	if d.Where != "host step: release 1.5.0 first" || d.HostStep == nil || d.HostStep.Total != 1 || d.HostStep.Upgraded != 0 {
		t.Fatalf("detail while the host step runs: where %q, host step %+v", d.Where, d.HostStep)
	}
	body := render(d)
	for _, want := range []string{"Host step: release 1.5.0 first", `data-host-step="true"`, `data-state="upgrading"`,
		`<progress value="0" max="1"`, "0 of 1 machine(s) upgraded", `href="/releases/1.5.0/rollout"`, ">1.4.0<", "host step: release 1.5.0 first"} {
		if !strings.Contains(body, want) {
			t.Errorf("the plan's progress lacks %q", want)
		}
	}

	d = planDetail(plan(models.RolloutDone, models.UpgradeUpgraded), false)
	if d.Where != "tier 1 of 1" || d.HostStep.Upgraded != 1 || !strings.Contains(render(d), "1 of 1 machine(s) upgraded") {
		t.Fatalf("detail once the host step is done: where %q, host step %+v", d.Where, d.HostStep)
	}

	none := plan(models.RolloutRunning, models.UpgradeUpgrading)
	none.HostRelease, none.HostStep = "", nil
	if d = planDetail(none, false); d.HostStep != nil || strings.Contains(render(d), "Host step") {
		t.Fatal("a plan without a host step shows one")
	}
}

// TestRolloutPage_NamesItsPlan: a plan's host step's rollout page says
// whose it is and that the fleet default stays; a fleet's says nothing.
func TestRolloutPage_NamesItsPlan(t *testing.T) {
	render := func(planID int64) string {
		v := &models.RolloutView{Rollout: models.Rollout{Version: "1.5.0", State: models.RolloutRunning, PlanID: planID, CreatedAt: time.Now()}}
		var buf bytes.Buffer
		if err := RolloutPage(Page{Title: "Rollout of 1.5.0"}, rolloutDetail(v)).Render(context.Background(), &buf); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	if body := render(7); !strings.Contains(body, `href="/plans/7"`) || !strings.Contains(body, "the fleet default stays as it is") {
		t.Fatalf("a host step's rollout page does not name its plan:\n%.2000s", body)
	}
	if body := render(0); strings.Contains(body, "plan-host-step") {
		t.Fatal("a fleet's rollout page names a plan")
	}
}
