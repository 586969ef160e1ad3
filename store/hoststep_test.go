package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// hostStepFixture: m1 (host 1.0.0, decodes 1) and m2 (host 1.5.0, decodes
// 1,2) run build 1 of mod; build 2 of mod needs schema 2; release 1.5.0
// (linux/amd64) decodes 1,2. The clock is fixed at the returned pointer.
func hostStepFixture(t *testing.T, s *store.Store) (*time.Time, []*models.Machine) {
	t.Helper()
	ctx := context.Background()
	clock := time.Now().UTC().Truncate(time.Second)
	s.Now = func() time.Time { return clock }
	ms := []*models.Machine{fixture(t, s, "m1"), fixture(t, s, "m2")}
	if err := s.RecordHostInfo(ctx, ms[1].ID, "1.5.0", "1,2"); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		c := composeMachine(t, s, m.ID)
		sentReport(t, s, m.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied,
			Running: map[string]models.RunningBuild{"mod": {Build: 1}}})
	}
	release(t, s, "1.5.0", "amd64", "1,2")
	if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: certManifest}, nil); err != nil {
		t.Fatal(err)
	}
	return &clock, ms
}

// TestPlan_HostReleaseFirst: a plan told to roll out a host release first
// starts a rollout of it to its machines that need it (m1, not m2, which
// already decodes what it decodes), limited to the plan (the fleet default
// stays); its first tier waits — reached by nothing, whatever the clock —
// until the rollout is done, and the tier's deadline then starts from
// there, not from the plan's creation. m1's step composes in full.
func TestPlan_HostReleaseFirst(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clock, ms := hostStepFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		if v.State != models.PlanRunning || v.HostRelease != "1.5.0" || v.HostStep == nil {
			t.Fatalf("plan: %+v", v)
		}
		hs := v.HostStep
		if hs.PlanID != v.ID || hs.State != models.RolloutRunning || len(hs.Machines) != 1 || hs.Machines[0].Machine != "m1" ||
			hs.Machines[0].State != models.UpgradeUpgrading {
			t.Fatalf("host step: %+v", hs)
		}
		for _, st := range v.Steps {
			if st.State != models.StepPending {
				t.Fatalf("a step was reached before the host step ended: %+v", v.Steps)
			}
		}
		if m, _ := s.Machine(ctx, "m1"); m.TargetHostVersion != "1.5.0" {
			t.Fatalf("m1's target host = %q", m.TargetHostVersion)
		}

		// Eight minutes of upgrading: the tiers still wait.
		*clock = clock.Add(8 * time.Minute)
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning || v.Steps[0].State != models.StepPending {
			t.Fatalf("while the host step runs: %s %q %+v", v.State, v.Reason, v.Steps)
		}

		// m1's trial advertises 1,2 and reports upgraded: the rollout is
		// done, the fleet default unchanged, and the first tier starts.
		if err := s.RecordHostInfo(ctx, ms[0].ID, "1.5.0", "1,2"); err != nil {
			t.Fatal(err)
		}
		m1, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeUpgraded, HostVersion: "1.5.0"})
		ended := *clock
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Plan(ctx, v.ID)
		if v.HostStep.State != models.RolloutDone || v.HostStep.FinishedAt == nil || !v.HostStep.FinishedAt.Equal(ended) {
			t.Fatalf("host step: %+v", v.HostStep)
		}
		if def, _ := s.HostDefault(ctx); def != "" {
			t.Fatalf("a plan's host step set the fleet default to %q", def)
		}
		st := v.Steps[0]
		if st.Machine != "m1" || st.State != models.StepSent || st.StartedAt == nil || !st.StartedAt.Equal(ended) {
			t.Fatalf("the first tier after the host step: %+v (rollout ended %s)", st, ended)
		}
		if full := composeMachine(t, s, ms[0].ID); full.HeldBack != "" || full.Schema != 2 {
			t.Fatalf("m1's step composed schema %d, held back %q", full.Schema, full.HeldBack)
		}

		// Nine minutes after the rollout ended (17 after the plan was
		// made) the tier is within its 10-minute deadline; eleven after,
		// with no report, it is not.
		*clock = ended.Add(9 * time.Minute)
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning {
			t.Fatalf("the deadline counted from the plan's creation: %s %q", v.State, v.Reason)
		}
		*clock = ended.Add(11 * time.Minute)
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted || !strings.HasPrefix(v.Reason, "halted: tier 1 of 2 (canary): m1 ") {
			t.Fatalf("past the deadline: %s %q", v.State, v.Reason)
		}
	})
}

// TestPlan_HostStepHalts: a host step whose trial rolls back halts the
// plan, saying why; no machine was reached with the build.
func TestPlan_HostStepHalts(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, ms := hostStepFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		m1, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m1.Generation, Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: "trial exited: status 2"})
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Plan(ctx, v.ID)
		want := "halted: host step: rollout of 1.5.0 halted: machine m1 rolled back: trial exited: status 2"
		if v.State != models.PlanHalted || v.Reason != want || v.HostStep.State != models.RolloutHalted {
			t.Fatalf("plan %s %q (host step %s); want halted %q", v.State, v.Reason, v.HostStep.State, want)
		}
		for _, st := range v.Steps {
			if st.State != models.StepPending {
				t.Fatalf("a step was reached: %+v", v.Steps)
			}
		}
		if b := composedBuild(t, s, ms[0]); b != 1 {
			t.Fatalf("m1 composed with build %d", b)
		}
		// Resumed, it halts again on the same host step: nothing moves.
		if v, err = s.SetPlanState(ctx, "test", v.ID, models.PlanResume); err != nil || v.State != models.PlanHalted || v.Reason != want {
			t.Fatalf("resumed: %s %q %v", v.State, v.Reason, err)
		}
	})
}

// TestPlan_HostStepDoneStillHeldBack: a machine the host step cannot
// upgrade (no build of the release for its platform) is still held back
// once the step is done, and the tier halts on it with the held-back
// reason, as without a host step.
func TestPlan_HostStepDoneStillHeldBack(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		c := composeMachine(t, s, m.ID)
		sentReport(t, s, m.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied,
			HostVersion: "1.0.0", Running: map[string]models.RunningBuild{"mod": {Build: 1}}})
		release(t, s, "1.5.0", "arm64", "1,2") // not m1's platform
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: certManifest}, nil); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		if v.HostStep == nil || v.HostStep.State != models.RolloutDone || len(v.HostStep.Machines) != 0 || v.Steps[0].State != models.StepSent {
			t.Fatalf("plan %+v, host step %+v", v, v.HostStep)
		}
		reason := "held back: needs host schema 2; host 1.0.0 decodes 1; no host release known to decode it"
		if held := composeMachine(t, s, m.ID); held.HeldBack != reason {
			t.Fatalf("composed %q", held.HeldBack)
		}
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Plan(ctx, v.ID)
		if want := "halted: tier 1 of 1: m1 " + reason; v.State != models.PlanHalted || v.Reason != want {
			t.Fatalf("plan %s %q; want %q", v.State, v.Reason, want)
		}
	})
}

// TestPlan_HostReleaseFirstRefused: a host release that is unknown, cannot
// carry the build, or cannot start (another rollout runs) is refused and
// nothing is recorded.
func TestPlan_HostReleaseFirstRefused(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		hostStepFixture(t, s)
		release(t, s, "1.4.0", "amd64", "1")
		release(t, s, "1.6.0", "amd64", "1,2")
		for _, tc := range []struct {
			name, release string
			is            error
			err           string
		}{
			{"Unknown", "9.9.9", models.ErrInvalid, "host_release_first: no host release 9.9.9"},
			{"TooOld", "1.4.0", models.ErrInvalid, "host_release_first: host release 1.4.0 for linux/amd64 decodes 1; build 2 of mod needs schema 2"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := s.CreatePlan(ctx, "test", "mod", 2, 0, tc.release)
				if !errors.Is(err, tc.is) || err.Error() != tc.err {
					t.Fatalf("= %v; want %q", err, tc.err)
				}
			})
		}
		rollOut(t, s, "1.6.0")
		if _, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "1.5.0"); !errors.Is(err, models.ErrConflict) {
			t.Fatalf("with another rollout running: %v", err)
		}
		if ps, err := s.Plans(ctx, 10, 0); err != nil || len(ps) != 0 {
			t.Fatalf("plans recorded: %+v %v", ps, err)
		}
	})
}

// TestPlan_CancelCancelsHostStep: cancelling a plan cancels its host
// step's rollout, on the record.
func TestPlan_CancelCancelsHostStep(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		hostStepFixture(t, s)
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		v, err = s.SetPlanState(ctx, "alice", v.ID, models.PlanCancel)
		if err != nil || v.State != models.PlanCancelled {
			t.Fatalf("cancel: %+v %v", v, err)
		}
		if hs := v.HostStep; hs.State != models.RolloutCancelled || hs.Reason != fmt.Sprintf("cancelled with plan %d by alice", v.ID) {
			t.Fatalf("host step: %s %q", hs.State, hs.Reason)
		}
	})
}

// TestPlan_AHostStepNoMachineNeeds: a plan with a host release first whose
// machines all decode what the build needs already has a host step of no
// machine, and runs (it was refused as if every machine were revoked).
func TestPlan_AHostStepNoMachineNeeds(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, ms := hostStepFixture(t, s)
		if err := s.RecordHostInfo(ctx, ms[0].ID, "1.5.0", "1,2"); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "1.5.0")
		if err != nil || v.State != models.PlanRunning {
			t.Fatalf("plan of build 2, host release 1.5.0 first, no host needing it: %v %+v", err, v)
		}
	})
}
