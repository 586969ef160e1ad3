package models

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStateRules_Precedence: each state word of DESIGN.md reached, and
// the precedence conflict > offline > rolled_back > upgrading > failed >
// behind > refused > rejected > unhealthy > current.
func TestStateRules_Precedence(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	recent := now.Add(-10 * time.Second)
	old := now.Add(-time.Hour)
	failingLong := now.Add(-5 * time.Minute)
	failingNow := now.Add(-5 * time.Second)
	base := func() Machine {
		return Machine{Generation: 3, FinishedGen: 3, AppliedGeneration: 3, CreatedAt: old, Health: HealthPassing}
	}
	for _, tc := range []struct {
		name string
		edit func(m *Machine)
		seen *time.Time
		want string
	}{
		{"Current", func(m *Machine) {}, &recent, StateCurrent},
		{"CurrentNoChecks", func(m *Machine) { m.Health = HealthNone }, &recent, StateCurrent},
		{"FailingWithinGraceIsCurrent", func(m *Machine) { m.Health, m.HealthSince = HealthFailing, &failingNow }, &recent, StateCurrent},
		{"Unhealthy", func(m *Machine) { m.Health, m.HealthSince = HealthFailing, &failingLong }, &recent, StateUnhealthy},
		{"RejectedOverUnhealthy", func(m *Machine) {
			m.LastOutcome = OutcomeRejected
			m.Health, m.HealthSince = HealthFailing, &failingLong
		}, &recent, StateRejected},
		{"RefusedOverRejected", func(m *Machine) { m.LastOutcome = OutcomeRefused }, &recent, StateRefused},
		{"BehindOverRefused", func(m *Machine) { m.Generation = 4; m.LastOutcome = OutcomeRefused }, &recent, StateBehind},
		{"HeldBackAppliedIsBehind", func(m *Machine) { m.HeldBack = "held back: needs host schema 2" }, &recent, StateBehind},
		{"FailedOverHeldBack", func(m *Machine) {
			m.Generation, m.LastOutcome, m.HeldBack = 4, OutcomeFailed, "held back: needs host schema 2"
		}, &recent, StateFailed},
		{"FailedOverBehind", func(m *Machine) { m.Generation = 4; m.LastOutcome = OutcomeFailed }, &recent, StateFailed},
		{"UpgradingOverFailed", func(m *Machine) {
			m.Generation = 4
			m.LastOutcome = OutcomeFailed
			m.TargetHostVersion = "2"
			m.HostVersion = "1"
		}, &recent, StateUpgrading},
		{"RolledBackOverUpgrading", func(m *Machine) { m.LastOutcome = OutcomeRolledBack; m.TargetHostVersion = "2"; m.HostVersion = "1" }, &recent, StateRolledBack},
		{"OfflineOverRolledBack", func(m *Machine) { m.LastOutcome = OutcomeRolledBack }, &old, StateOffline},
		{"NeverPolledLongAgoIsOffline", func(m *Machine) {}, nil, StateOffline},
		{"JustEnrolledIsNotOffline", func(m *Machine) { m.CreatedAt = recent; m.Generation = 1; m.FinishedGen = 0 }, nil, StateBehind},
		{"RevokedOverOffline", func(m *Machine) { m.RevokedAt = &old }, &old, StateRevoked},
		{"RevokedOverCurrent", func(m *Machine) { m.RevokedAt = &recent }, &recent, StateRevoked},
		{"ConflictOverAll", func(m *Machine) { m.Conflict = true; m.RevokedAt = &old }, &old, StateConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			tc.edit(&m)
			if got := DefaultStateRules.State(&m, tc.seen, now); got != tc.want {
				t.Fatalf("%s, want %s", got, tc.want)
			}
		})
	}
}

func TestJudgeStep(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	started := now.Add(-time.Minute)
	recent := now.Add(-5 * time.Second)
	longAgo := now.Add(-time.Hour)
	failingLong := now.Add(-5 * time.Minute)
	st := &PlanStep{Generation: 4, StartedAt: &started}
	for _, tc := range []struct {
		name     string
		m        Machine
		running  int64
		deadline time.Duration
		want     string
		reason   string
	}{
		{"Applied", Machine{Name: "m1", AppliedGeneration: 4, FinishedGen: 4, Health: HealthPassing, LastSeen: &recent}, 2, time.Hour, StepApplied, ""},
		{"AppliedRunningOlder", Machine{Name: "m1", AppliedGeneration: 4, FinishedGen: 4, LastSeen: &recent}, 1, time.Hour, "", ""},
		{"WithinGrace", Machine{Name: "m1", AppliedGeneration: 4, Health: HealthFailing, HealthSince: &recent, LastSeen: &recent}, 2, time.Hour, "", ""},
		{"Unhealthy", Machine{Name: "m1", AppliedGeneration: 4, Health: HealthFailing, HealthCheck: "app.svc", HealthDetail: "exit status 1", HealthSince: &failingLong, LastSeen: &recent}, 2, time.Hour, StepFailed, "m1 check app.svc unhealthy since"},
		{"Refused", Machine{Name: "m1", FinishedGen: 4, LastOutcome: OutcomeRefused, LastOutcomeGen: 4, LastReason: "escape", LastSeen: &recent}, 1, time.Hour, StepFailed, "m1 refused generation 4: escape"},
		// A refusal tied to no send (a declaration the host could not
		// verify) says nothing of the generation it applied.
		{"RefusedOfNoGenerationAfterApplying", Machine{Name: "m1", AppliedGeneration: 4, FinishedGen: 4, LastOutcome: OutcomeRefused, LastReason: "signature",
			Health: HealthPassing, LastSeen: &recent}, 2, time.Hour, StepApplied, ""},
		{"FailedAfterSend", Machine{Name: "m1", AppliedGeneration: 3, LastOutcome: OutcomeFailed, LastOutcomeGen: 4, LastReason: "disk", LastReportAt: &recent, LastSeen: &recent}, 1, time.Hour, StepFailed, "m1 failed to apply generation 4: disk"},
		{"FailedLaterGeneration", Machine{Name: "m1", AppliedGeneration: 3, LastOutcome: OutcomeFailed, LastOutcomeGen: 5, LastReason: "disk", LastReportAt: &recent, LastSeen: &recent}, 1, time.Hour, StepFailed, "m1 failed to apply generation 5: disk"},
		{"FailedBeforeSendIsOld", Machine{Name: "m1", AppliedGeneration: 3, LastOutcome: OutcomeFailed, LastOutcomeGen: 3, LastReportAt: &longAgo, LastSeen: &recent}, 1, time.Hour, "", ""},
		{"FailedOlderGenerationRetried", Machine{Name: "m1", AppliedGeneration: 2, LastOutcome: OutcomeFailed, LastOutcomeGen: 3, LastReportAt: &recent, LastSeen: &recent}, 1, time.Hour, "", ""},
		{"HeldBack", Machine{Name: "m2", AppliedGeneration: 4, FinishedGen: 4, LastSeen: &recent,
			HeldBack: "held back: needs host schema 2; host 1.4.0 decodes 1; release 1.5.0 decodes 1,2"}, 1, time.Hour, StepFailed,
			"m2 held back: needs host schema 2; host 1.4.0 decodes 1; release 1.5.0 decodes 1,2"},
		{"HeldBackNotYetApplied", Machine{Name: "m2", AppliedGeneration: 3, LastSeen: &recent,
			HeldBack: "held back: needs host schema 2; host 1.4.0 decodes 1; no host release known to decode it"}, 1, time.Hour, StepFailed,
			"m2 held back: needs host schema 2; host 1.4.0 decodes 1; no host release known to decode it"},
		{"HeldBackButRefusedFirst", Machine{Name: "m2", FinishedGen: 4, LastOutcome: OutcomeRefused, LastOutcomeGen: 4, LastReason: "escape", LastSeen: &recent,
			HeldBack: "held back: needs host schema 2; host 1.4.0 decodes 1"}, 1, time.Hour, StepFailed, "m2 refused generation 4: escape"},
		// Nothing can be sent: failed at once, where it said "sent" until
		// the deadline halted the plan "did not report".
		{"CannotBeComposed", Machine{Name: "m3", Generation: 4, AppliedGeneration: 3, LastSeen: &recent, ComposeError: "module web build 3 resource conf: variables: ${var.port}",
			ComposeErrorGen: 4}, 1, time.Hour, StepFailed, "m3 generation 4 cannot be composed: module web build 3 resource conf: variables: ${var.port}"},
		{"ComposeErrorOfAnOlderGeneration", Machine{Name: "m3", Generation: 5, AppliedGeneration: 3, LastSeen: &recent, ComposeError: "variables", ComposeErrorGen: 4},
			1, time.Hour, "", ""},
		// A later generation's, nothing composed since the step's (the
		// caller keeps the error only then): nothing can be sent.
		{"ComposeErrorOfALaterGeneration", Machine{Name: "m3", Generation: 5, AppliedGeneration: 3, LastSeen: &recent, ComposeError: "variables", ComposeErrorGen: 5},
			1, time.Hour, StepFailed, "m3 generation 5 cannot be composed: variables"},
		{"NoReportWithinDeadline", Machine{Name: "m3", AppliedGeneration: 3, LastSeen: &recent}, 1, 30 * time.Second, StepFailed, "m3 did not report generation 4 within 30s"},
		{"OfflinePastDeadline", Machine{Name: "m3", AppliedGeneration: 3, LastSeen: &longAgo}, 1, 30 * time.Second, StepFailed, "m3 offline since"},
		// Enrolment sets the time it was last seen: seen then only, its
		// host never polled, and no "offline since" its enrolment.
		{"OfflineSeenAtEnrolmentOnly", Machine{Name: "m3", LastSeen: &longAgo, CreatedAt: longAgo}, 1, 30 * time.Second, StepFailed, "m3 offline: never polled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := JudgeStep(DefaultStateRules, &tc.m, tc.running, st, 2, tc.deadline, now)
			if v.State != tc.want || !strings.HasPrefix(v.Reason, tc.reason) {
				t.Fatalf("%+v, want %q %q", v, tc.want, tc.reason)
			}
		})
	}
}

func TestTierWords(t *testing.T) {
	for _, tc := range []struct {
		tier, tiers int64
		done        bool
		want        string
	}{
		{0, 2, false, "tier 1 of 2 (canary)"},
		{1, 2, false, "tier 2 of 2"},
		{2, 2, true, "tier 2 of 2 — done"},
	} {
		if got := TierWords(tc.tier, tc.tiers, tc.done); got != tc.want {
			t.Errorf("TierWords(%d, %d, %v) = %q, want %q", tc.tier, tc.tiers, tc.done, got, tc.want)
		}
	}
}

func TestPlanMove(t *testing.T) {
	for _, tc := range []struct {
		action, from, to string
		ok               bool
	}{
		{PlanPause, PlanRunning, PlanPaused, true},
		{PlanPause, PlanHalted, "", false},
		{PlanResume, PlanPaused, PlanRunning, true},
		{PlanResume, PlanHalted, PlanRunning, true},
		{PlanCancel, PlanHalted, PlanCancelled, true},
		{PlanCancel, PlanDone, "", false},
		{PlanRollback, PlanHalted, PlanRolledBack, true},
		{PlanRollback, PlanRunning, "", false},
		{PlanRollback, PlanRolledBack, "", false},
		{"explode", PlanRunning, "", false},
	} {
		t.Run(tc.action+"From"+tc.from, func(t *testing.T) {
			if to, ok := PlanMove(tc.action, tc.from); to != tc.to || ok != tc.ok {
				t.Fatalf("PlanMove(%s, %s) = %q %v, want %q %v", tc.action, tc.from, to, ok, tc.to, tc.ok)
			}
		})
	}
}

func TestPlanActions(t *testing.T) {
	for state, want := range map[string]string{
		PlanRunning: "pause cancel", PlanPaused: "resume cancel", PlanHalted: "resume cancel rollback",
		PlanDone: "", PlanRolledBack: "", PlanCancelled: "", PlanSuperseded: "", PlanRefused: "",
	} {
		if got := strings.Join(PlanActions(state), " "); got != want {
			t.Errorf("PlanActions(%s) = %q, want %q", state, got, want)
		}
	}
}

// TestPlanView_TierWords: a finished two-tier plan's tier points past the
// last; it must read "tier 2 of 2 — done", never "tier 3 of 2" (nor the
// bare "tier 2" the plans page used to show).
func TestPlanView_TierWords(t *testing.T) {
	two := []PlanStep{{Tier: 0}, {Tier: 1}, {Tier: 1}}
	for _, tc := range []struct {
		name string
		v    PlanView
		want string
	}{
		{"Canary", PlanView{Plan: Plan{State: PlanRunning, Tier: 0}, Steps: two}, "tier 1 of 2 (canary)"},
		{"Second", PlanView{Plan: Plan{State: PlanRunning, Tier: 1}, Steps: two}, "tier 2 of 2"},
		{"Done", PlanView{Plan: Plan{State: PlanDone, Tier: 2}, Steps: two}, "tier 2 of 2 — done"},
		{"HaltedCanary", PlanView{Plan: Plan{State: PlanHalted, Tier: 0}, Steps: two}, "tier 1 of 2 (canary)"},
		{"NoMachines", PlanView{Plan: Plan{State: PlanDone}}, "no machines to reach"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.TierWords(); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestJoinToken_State(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Hour)
	for _, tc := range []struct {
		name string
		jt   JoinToken
		want string
	}{
		{"unused", JoinToken{ExpiresAt: now.Add(time.Hour)}, JoinTokenUnused},
		{"expired at its instant", JoinToken{ExpiresAt: now}, JoinTokenExpired},
		{"used wins over expired", JoinToken{ExpiresAt: earlier, UsedAt: &earlier}, JoinTokenUsed},
		{"revoked wins over expired", JoinToken{ExpiresAt: earlier, RevokedAt: &earlier}, JoinTokenRevoked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.jt.State(now); got != tc.want {
				t.Fatalf("State = %s, want %s", got, tc.want)
			}
			if tc.jt.Spendable(now) != (tc.want == JoinTokenUnused) {
				t.Fatal("Spendable disagrees with State")
			}
		})
	}
}

func TestBuild_Usable(t *testing.T) {
	for _, tc := range []struct {
		state string
		want  error
	}{
		{BuildReady, nil},
		{BuildYanked, ErrConflict},
		{BuildQueued, ErrNotFound},
		{BuildFailed, ErrNotFound},
	} {
		t.Run(tc.state, func(t *testing.T) {
			err := (&Build{Number: 2, State: tc.state, YankReason: "leaks"}).Usable()
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Usable() = %v, want %v", err, tc.want)
			}
			if tc.state == BuildYanked && !strings.Contains(err.Error(), "leaks") {
				t.Fatalf("a yanked build's error does not say why: %v", err)
			}
		})
	}
}

// TestLastSeen_TheLaterWord: a host that polls another instance now is
// not offline on this one because this one heard from it long ago.
func TestLastSeen_TheLaterWord(t *testing.T) {
	now := time.Now()
	long, recent := now.Add(-time.Hour), now.Add(-time.Minute)
	rules := DefaultStateRules
	m := Machine{Generation: 3, FinishedGen: 3, CreatedAt: long, LastSeen: &recent}
	if got := rules.State(&m, LastSeen(&long, &m), now); got != StateCurrent {
		t.Errorf("heard here an hour ago, by another instance a minute ago: %s, want %s", got, StateCurrent)
	}
	if got := LastSeen(&recent, &Machine{LastSeen: &long}); got == nil || !got.Equal(recent) {
		t.Errorf("heard here a minute ago, the store an hour ago: %v, want %v", got, recent)
	}
	if got := LastSeen(nil, &m); got == nil || !got.Equal(recent) {
		t.Errorf("not heard here: %v, want the store's %v", got, recent)
	}
	if got := LastSeen(nil, &Machine{}); got != nil {
		t.Errorf("never heard: %v, want nil", got)
	}
}
