package web

import (
	"strings"
	"testing"
	"time"

	"mesh/models"
)

// TestRow_HeldBackSaysWhy: a machine that applied held-back content is
// behind, and its row says the held-back reason, not "no report yet".
func TestRow_HeldBackSaysWhy(t *testing.T) {
	now := time.Now()
	reason := "held back: needs host schema 2; host 1.4.0 decodes 1; no host release known to decode it"
	m := &models.Machine{Name: "m1", Generation: 5, AppliedGeneration: 5, FinishedGen: 5, LastOutcome: models.OutcomeApplied,
		HeldBack: reason, GenerationAt: now, CreatedAt: now, Health: models.HealthNone}
	r := row(models.DefaultStateRules, m, &now, nil, now)
	if r.State != models.StateBehind || r.Badge != "behind: "+reason || !strings.Contains(r.Since, "host rollout") {
		t.Fatalf("row = %+v", r)
	}
}

// TestRow_UpgradingSaysItCannotBeComposed: a machine whose host is being
// upgraded is "upgrading", and when its generation cannot be composed the
// row says so beside it (it was only in the machine's JSON).
func TestRow_UpgradingSaysItCannotBeComposed(t *testing.T) {
	now := time.Now()
	m := &models.Machine{Name: "m2", Generation: 4, AppliedGeneration: 3, FinishedGen: 3, HostVersion: "1.4.0", TargetHostVersion: "1.5.0",
		ComposeError: "variables: ${var.port} is not set on machine m2", ComposeErrorGen: 4, GenerationAt: now, CreatedAt: now, Health: models.HealthNone}
	r := row(models.DefaultStateRules, m, &now, nil, now)
	if r.State != models.StateUpgrading || !strings.Contains(r.Badge, "generation 4 cannot be composed: variables: ${var.port}") {
		t.Fatalf("row = %+v", r)
	}
}

// TestRow_UpgradingSaysItsHostRefused: a host that will not upgrade (not
// run under `mesh-host launch`) reports the release refused; its machine
// is still upgrading, and the row says why it will not.
func TestRow_UpgradingSaysItsHostRefused(t *testing.T) {
	now := time.Now()
	reason := "host release 1.5.0 refused: this host does not run under `mesh-host launch`"
	m := &models.Machine{Name: "m2", Generation: 4, AppliedGeneration: 4, FinishedGen: 4, HostVersion: "1.4.0", TargetHostVersion: "1.5.0",
		LastOutcome: models.OutcomeRefused, LastReason: reason, GenerationAt: now, CreatedAt: now, Health: models.HealthNone}
	r := row(models.DefaultStateRules, m, &now, nil, now)
	if r.State != models.StateUpgrading || !strings.HasSuffix(r.Badge, "; its host refused it: "+reason) {
		t.Fatalf("row = %+v", r)
	}
}

// TestRow_OfflineNeverPolledSaysSo: enrolment sets the time a machine was
// last seen; one whose host never polled since is offline "never polled",
// not "last seen" at its enrolment as if its host had been heard then.
func TestRow_OfflineNeverPolledSaysSo(t *testing.T) {
	now := time.Now()
	enrolled := now.Add(-time.Hour)
	m := &models.Machine{Name: "m4", Generation: 1, GenerationAt: enrolled, CreatedAt: enrolled, Health: models.HealthNone}
	r := row(models.DefaultStateRules, m, &enrolled, nil, now)
	if r.State != models.StateOffline || !strings.Contains(r.Since, "never polled") || strings.Contains(r.Since, "last seen") {
		t.Fatalf("row = %+v", r)
	}
}

// TestPlanDetail_AStepSaysWhatWasChecked: a step that reached its machine
// made the machine's generation; whether it was sent is its host's poll's
// doing. The page says the generation made, not "sent" of a host that has
// not polled since (its machine's page shows its sends).
func TestPlanDetail_AStepSaysWhatWasChecked(t *testing.T) {
	v := &models.PlanView{Plan: models.Plan{ID: 1, Module: "web", Build: 2, State: models.PlanRunning},
		Steps: []models.PlanStep{{Machine: "m2", State: models.StepSent, Generation: 5}}}
	d := planDetail(v, false)
	if w := d.Tiers[0].Steps[0].Words; strings.Contains(w, "sent") || !strings.Contains(w, "generation 5 made for it") {
		t.Fatalf("step words %q", w)
	}
}
