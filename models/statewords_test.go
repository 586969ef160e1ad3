package models

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSayState_OfflineAndBehindSaysBoth: a machine whose host is offline
// and four generations behind said only "offline, last seen 3m ago":
// nothing of it being behind, or since when.
func TestSayState_OfflineAndBehindSaysBoth(t *testing.T) {
	now := time.Now()
	seen := now.Add(-3 * time.Minute)
	m := &Machine{Name: "m5", Generation: 9, FinishedGen: 5, AppliedGeneration: 5,
		GenerationAt: now.Add(-2 * time.Minute), GenerationTrigger: "plan", CreatedAt: now.Add(-time.Hour)}
	w := SayState(StateOffline, m, &seen, nil, now)
	if w.Badge != "offline, behind by 4 generation(s)" || !strings.Contains(w.Since, "last seen") || !strings.Contains(w.Since, "generation 9 made 2m ago (plan), 5 the last it finished") {
		t.Fatalf("offline and 4 generations behind: %q / %q", w.Badge, w.Since)
	}
	m.FinishedGen = 9
	if w := SayState(StateOffline, m, &seen, nil, now); w.Badge != "offline" {
		t.Fatalf("offline, not behind: %q", w.Badge)
	}
}

// TestSayState_UnhealthySaysTheOtherFailingChecks: a machine whose checks
// a, b, c, d and e fail was said unhealthy by the one failing longest
// alone: an operator mending it learnt of the others one by one.
func TestSayState_UnhealthySaysTheOtherFailingChecks(t *testing.T) {
	now := time.Now().UTC()
	since := now.Add(-5 * time.Minute)
	m := &Machine{Name: "m1", Generation: 3, FinishedGen: 3, AppliedGeneration: 3, Health: HealthFailing,
		HealthCheck: "a.svc", HealthDetail: "a down", HealthSince: &since, HealthAt: &now}
	failing := func(names ...string) string {
		f := failingChecks{At: now, Since: map[string]time.Time{"a.svc": since}}
		for _, n := range names {
			f.Since[n] = now
		}
		b, _ := json.Marshal(f)
		return string(b)
	}
	if w := SayState(StateUnhealthy, m, &now, nil, now); w.Badge != "unhealthy: check a.svc: a down" {
		t.Fatalf("one check failing: %q", w.Badge)
	}
	m.HealthFailing = failing("e.svc", "b.svc", "d.svc", "c.svc")
	if w := SayState(StateUnhealthy, m, &now, nil, now); w.Badge != "unhealthy: check a.svc: a down (also failing: b.svc, c.svc, d.svc and 1 more)" {
		t.Fatalf("five checks failing: %q", w.Badge)
	}
	m.HealthFailing = failing("b.svc")
	if w := SayState(StateCurrent, m, &now, nil, now); !strings.HasSuffix(w.Badge, "— check a.svc failing, within the grace (also failing: b.svc)") {
		t.Fatalf("two checks failing within the grace: %q", w.Badge)
	}
}

// TestStateWords_BehindAndUpgradingSayWhatTheirTimesAre: a machine's host
// had been behind, or upgrading, for twenty minutes when a person changed
// its variables; its words said "since" the generation that change made,
// 0s ago, as if it had just fallen behind or begun its upgrade. The
// latest generation's time is said as that, with the last one finished;
// an upgrade's, as when its host last said its version.
func TestStateWords_BehindAndUpgradingSayWhatTheirTimesAre(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	enrolled, seen := now.Add(-time.Hour), now.Add(-3*time.Second)
	m := &Machine{Name: "m1", Generation: 5, FinishedGen: 3, AppliedGeneration: 3, GenerationAt: now, GenerationTrigger: TriggerVariables,
		CreatedAt: enrolled, LastSeen: &seen, HostVersion: "1.0.0"}
	w := SayState(StateBehind, m, &seen, nil, now)
	if !strings.HasPrefix(w.Since, "at generation 5, made 2026-12-07 12:00:00Z (0s ago, variables), 3 the last it finished") {
		t.Errorf("behind: %q", w.Since)
	}
	m.Generation, m.FinishedGen, m.TargetHostVersion = 3, 3, "1.5.0"
	w = SayState(StateUpgrading, m, &seen, nil, now)
	if w.Since != "as its host said 2026-12-07 11:59:57Z (3s ago)" {
		t.Errorf("upgrading: %q", w.Since)
	}
	w = SayState(StateUpgrading, m, &enrolled, nil, now)
	if w.Since != "as its host said at enrolment 1h ago" {
		t.Errorf("upgrading, never polled: %q", w.Since)
	}
}
