package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// upgradingIn is the machine the latest rollout of version is upgrading
// ("" for none).
func upgradingIn(t *testing.T, s *store.Store, version string) string {
	t.Helper()
	ro, err := s.Rollout(context.Background(), version)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ro.Machines {
		if m.State == models.UpgradeUpgrading {
			return m.Machine
		}
	}
	return ""
}

// rolledOutToAll uploads version and rolls it out to names at once (all
// canaries), each host applying the generation naming it and reporting
// upgraded.
func rolledOutToAll(t *testing.T, s *store.Store, version string, names ...string) {
	t.Helper()
	release(t, s, version, "amd64", "1")
	if _, err := s.StartRollout(context.Background(), "test", version, strconv.Itoa(len(names)), int64(len(names)), 600); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		applied(t, s, n, 1)
		upgradedTo(t, s, n, version)
	}
}

// TestRollout_ADeliveredReleaseThatSilencesItsHostsFails: the
// controller's instance (which stamps started_at) runs 2 s ahead of the
// instance holding the hosts' polls (which stamps last_seen). Each canary's
// held poll is answered the moment its generation is bumped: the store
// records the send of the generation naming 1.5.0 and the old host's
// applied report of it, and last_seen is flushed with the poll's answer
// time — 2 s "before" started_at. 1.5.0 then takes each host down for good
// (no poll, no report). neverTried calls each "never tried", withdraws it
// and hands the release to the next canary: every machine of the fleet
// gets the release that killed the one before, and the release stays
// ready to be rolled out again. A declaration sent to the machine since
// its upgrade started (within a minute before, for the clocks) is now the
// proof it was tried: the deadline fails the release.
func TestRollout_ADeliveredReleaseThatSilencesItsHostsFails(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for _, n := range []string{"a", "b", "c"} {
			fixture(t, s, n)
		}
		offset := 2 * time.Second // the controller's clock, ahead of the hub's
		s.Now = func() time.Time { return time.Now().Add(offset) }
		release(t, s, "1.5.0", "amd64", "1")
		if _, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 60); err != nil {
			t.Fatal(err)
		}
		var delivered []string
		for range 3 {
			name := upgradingIn(t, s, "1.5.0")
			if name == "" {
				break
			}
			m, _ := s.Machine(ctx, name)
			// The held poll is answered with the generation naming 1.5.0
			// (send row), the hub flushes the answer's time, the old host
			// applies it and its launcher starts 1.5.0, which never comes up.
			recordSend(t, s, m.ID, m.Generation)
			if err := s.FlushLastSeen(ctx, []store.Seen{{ID: m.ID, At: time.Now()}}); err != nil {
				t.Fatal(err)
			}
			applied(t, s, name, 1)
			delivered = append(delivered, name)
			offset += 61 * time.Second // the deadline runs out
			for range 2 {
				if err := s.StepRollouts(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		rows := []string{}
		for _, m := range ro.Machines {
			rows = append(rows, m.Machine+" "+m.State+": "+m.Reason)
		}
		if r := releaseOf(t, s, "1.5.0"); r.State != models.ReleaseFailed || len(delivered) > 1 {
			t.Fatalf("1.5.0 was sent to %v, each host silent after applying it, and the release is %s (rollout %s %q):\n%s",
				delivered, r.State, ro.State, ro.Reason, strings.Join(rows, "\n"))
		}
	})
}

// TestRollout_AHostStepNoMachineTookIsNotDone: a plan's host step of 1.5.0
// reaches m1, whose host was last heard from a minute before the step
// started. Its deadline runs out: neverTried withdraws m1, and the host
// step — every machine of it withdrawn — is "done" ("its machines run
// 1.5.0"), the release-wide "no machine tried it" halt being for fleet
// rollouts only. The plan goes on to its build that needs schema 2 on a
// host that decodes 1. A plan's host step is not withdrawn from: its
// deadline fails it, as before, and the plan halts.
func TestRollout_AHostStepNoMachineTookIsNotDone(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clock, _ := hostStepFixture(t, s)
		*clock = clock.Add(time.Minute) // m1's host quiet since its last poll
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		if v.HostStep == nil || len(v.HostStep.Machines) != 1 || v.HostStep.Machines[0].State != models.UpgradeUpgrading {
			t.Fatalf("host step: %+v", v.HostStep)
		}
		*clock = clock.Add(11 * time.Minute)
		for range 2 {
			if err := s.StepRollouts(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.StepPlans(ctx); err != nil {
				t.Fatal(err)
			}
		}
		v, _ = s.Plan(ctx, v.ID)
		m1, _ := s.Machine(ctx, "m1")
		if v.HostStep.State == models.RolloutDone && m1.HostVersion != "1.5.0" {
			t.Fatalf("host step done with no machine upgraded (m1 %s: %s; host %s); plan %s %q, steps %+v",
				v.HostStep.Machines[0].State, v.HostStep.Machines[0].Reason, m1.HostVersion, v.State, v.Reason, v.Steps)
		}
	})
}

// TestRollout_ARolloutOfTheSameVersionAgainTakesBackToTheReleaseBefore:
// 1.5.0 is rolled out to a and b. 1.6.0's rollout upgrades a, then is
// paused and cancelled before b. 1.6.0 is rolled out again: b is the
// canary, a (its host runs 1.6.0) is upgraded at once — its row's previous
// is 1.6.0, its target when this rollout began. b's host then crash-loops
// on 1.6.0 and is rolled back: 1.6.0 fails. failRelease puts a back to the
// previous of its newest row: 1.6.0. a stays on the failed release,
// reading current, the audit saying "a to 1.6.0". A row whose previous is
// the version itself is passed over for the one before it.
func TestRollout_ARolloutOfTheSameVersionAgainTakesBackToTheReleaseBefore(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "a"), fixture(t, s, "b")
		rolledOutToAll(t, s, "1.5.0", "a", "b")
		release(t, s, "1.6.0", "amd64", "1")
		if _, err := s.StartRollout(ctx, "test", "1.6.0", "1", 1, 600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetRolloutState(ctx, "test", "1.6.0", "pause"); err != nil {
			t.Fatal(err)
		}
		applied(t, s, "a", 1)
		upgradedTo(t, s, "a", "1.6.0")
		if _, err := s.SetRolloutState(ctx, "test", "1.6.0", "cancel"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.StartRollout(ctx, "test", "1.6.0", "1", 1, 600); err != nil {
			t.Fatal(err)
		}
		applied(t, s, "b", 1)
		upgradedTo(t, s, "b", "1.6.0")
		if ro, _ := s.Rollout(ctx, "1.6.0"); ro.State != models.RolloutDone {
			t.Fatalf("second rollout of 1.6.0: %s %+v", ro.State, ro.Machines)
		}
		mb, _ := s.Machine(ctx, "b")
		sentReport(t, s, b.ID, &models.Report{Generation: mb.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.5.0",
			Reason: models.RolledBackReason("1.6.0", "1.5.0", "it was kept after its trial, then its host exited 5 times in a row")})
		if r := releaseOf(t, s, "1.6.0"); r.State != models.ReleaseFailed {
			t.Fatalf("release 1.6.0 is %s", r.State)
		}
		applied(t, s, "a", 1)
		ma, _ := s.Machine(ctx, "a")
		now := time.Now()
		st := s.Rules.State(ma, &now, now)
		if ma.TargetHostVersion == "1.6.0" || strings.HasPrefix(composedHost(t, s, a), "1.6.0 ") {
			t.Fatalf("a runs the failed 1.6.0 (host %s), its target %q, state %s", ma.HostVersion, ma.TargetHostVersion, st)
		}
	})
}

// TestRollout_APreviousFailedSinceIsNotPutBack: 1.5.0 then
// 1.6.0 are rolled out to a and b (done). 1.7.0's rollout starts with a as
// its canary (row previous 1.6.0). b's host crash-loops on 1.6.0 and is
// rolled back: 1.6.0 fails, b goes back to 1.5.0 (targets-back), a's
// target (1.7.0) is left. a's 1.7.0 trial then rolls back to 1.6.0: its
// target goes back to its row's previous, 1.6.0 — a release known to fail,
// which no declaration carries: a runs it and reads current. A previous
// that failed since is put back as the fleet default instead.
func TestRollout_APreviousFailedSinceIsNotPutBack(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "a"), fixture(t, s, "b")
		for _, v := range []string{"1.5.0", "1.6.0"} {
			rolledOutToAll(t, s, v, "a", "b")
		}
		release(t, s, "1.7.0", "amd64", "1")
		if _, err := s.StartRollout(ctx, "test", "1.7.0", "1", 1, 600); err != nil {
			t.Fatal(err)
		}
		if c := upgradingIn(t, s, "1.7.0"); c != "a" {
			t.Fatalf("1.7.0's canary is %q", c)
		}
		mb, _ := s.Machine(ctx, "b")
		sentReport(t, s, b.ID, &models.Report{Generation: mb.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.5.0",
			Reason: models.RolledBackReason("1.6.0", "1.5.0", "it was kept after its trial, then its host exited 5 times in a row")})
		if r := releaseOf(t, s, "1.6.0"); r.State != models.ReleaseFailed {
			t.Fatalf("release 1.6.0 is %s", r.State)
		}
		applied(t, s, "a", 1)
		if err := s.RecordHostInfo(ctx, a.ID, "1.6.0", "1"); err != nil {
			t.Fatal(err)
		}
		ma, _ := s.Machine(ctx, "a")
		sentReport(t, s, a.ID, &models.Report{Generation: ma.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.6.0",
			Reason: models.RolledBackReason("1.7.0", "1.6.0", "trial exited: status 2")})
		applied(t, s, "a", 1) // its next generation, naming no host release
		ma, _ = s.Machine(ctx, "a")
		now := time.Now()
		if ma.TargetHostVersion == "1.6.0" {
			t.Fatalf("a's target went back to 1.6.0, failed (host %s, state %s, declaration names %q)",
				ma.HostVersion, s.Rules.State(ma, &now, now), composedHost(t, s, a))
		}
	})
}

// TestRollout_ACanaryInConflictFailsNoRelease: the canary a is in
// conflict (nothing is sent to it until an admin resolves it) but its host
// polls on, so its last_seen is after its upgrade started. Its deadline
// runs out and 1.5.0 is failed for good — over a host that never had the
// declaration naming it, the very case neverTried was written for. A
// machine in conflict is now withdrawn at its deadline, and is the last
// a rollout takes as a canary.
func TestRollout_ACanaryInConflictFailsNoRelease(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := fixture(t, s, "a")
		if err := s.DB().Exec("UPDATE machines SET conflict = ?, conflict_host_generation = generation + 5 WHERE id = ?", true, a.ID).Error; err != nil {
			t.Fatal(err)
		}
		offset := time.Duration(0)
		s.Now = func() time.Time { return time.Now().Add(offset) }
		release(t, s, "1.5.0", "amd64", "1")
		if _, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 60); err != nil {
			t.Fatal(err)
		}
		if c := upgradingIn(t, s, "1.5.0"); c != "a" {
			t.Fatalf("the canary is %q", c)
		}
		offset = 61 * time.Second
		// a's host polls on (answered 409/nothing: it is in conflict).
		if err := s.FlushLastSeen(ctx, []store.Seen{{ID: a.ID, At: s.Now()}}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := s.StepRollouts(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if r := releaseOf(t, s, "1.5.0"); r.State == models.ReleaseFailed {
			t.Fatalf("1.5.0 failed over a canary in conflict, sent nothing: %s", r.Failure)
		}
	})
}

// TestRollout_AFailedPutBackTrialFailsNoReleaseBefore: 1.5.0 then 1.6.0
// are rolled out to a, b and c (done; 1.6.0 the fleet default). a's host
// crash-loops on 1.6.0 and is rolled back: 1.6.0 fails, the default goes
// back to 1.5.0, and failRelease sends b and c — which had run 1.6.0 fine —
// back to 1.5.0, each as its own host's trial. b's trial of 1.5.0 fails
// (1.5.0 cannot start on what 1.6.0 left, say) and its launcher returns to
// 1.6.0, reporting the rollback from 1.5.0. That report is taken as
// "1.5.0 rolled back after its upgraded report": 1.5.0 — the release the
// whole fleet ran — is failed too, the fleet default is dropped, and c is
// moved again, to nothing. A machine a later rollout upgraded since has
// left the release behind: such a rollback fails no rollout of it.
func TestRollout_AFailedPutBackTrialFailsNoReleaseBefore(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b, _ := fixture(t, s, "a"), fixture(t, s, "b"), fixture(t, s, "c")
		for _, v := range []string{"1.5.0", "1.6.0"} {
			release(t, s, v, "amd64", "1")
			if _, err := s.StartRollout(ctx, "test", v, "3", 3, 600); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"a", "b", "c"} {
				applied(t, s, n, 1)
				upgradedTo(t, s, n, v)
			}
		}
		m, _ := s.Machine(ctx, "a")
		sentReport(t, s, a.ID, &models.Report{Generation: m.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.5.0",
			Reason: models.RolledBackReason("1.6.0", "1.5.0", "it was kept after its trial, then its host exited 5 times in a row")})
		if mb, _ := s.Machine(ctx, "b"); mb.TargetHostVersion != "1.5.0" {
			t.Fatalf("b's target %q", mb.TargetHostVersion)
		}
		// b's put-back trial of 1.5.0 fails; its launcher keeps 1.6.0.
		applied(t, s, "b", 1)
		mb, _ := s.Machine(ctx, "b")
		sentReport(t, s, b.ID, &models.Report{Generation: mb.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.6.0",
			Reason: models.RolledBackReason("1.5.0", "1.6.0", "trial exited: status 1")})
		def, _ := s.HostDefault(ctx)
		mc, _ := s.Machine(ctx, "c")
		if r := releaseOf(t, s, "1.5.0"); r.State == models.ReleaseFailed || def != "1.5.0" || mc.TargetHostVersion != "1.5.0" {
			t.Fatalf("b's failed trial back to 1.5.0 failed 1.5.0 (%s: %q); fleet default %q; c's target %q", r.State, r.Failure, def, mc.TargetHostVersion)
		}
	})
}

// TestRelease_FailedSaysWhenAndWhyFirst: 1.6.0, rolled out to a and b, is
// rolled back by a's launcher, and an hour later by b's. The release reads
// failed with when and why of its first failure: the state word was shown
// without when, and each later failure wrote its words over the first.
func TestRelease_FailedSaysWhenAndWhyFirst(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "a"), fixture(t, s, "b")
		rolledOutToAll(t, s, "1.6.0", "a", "b")
		if r := releaseOf(t, s, "1.6.0"); r.FailedAt != nil {
			t.Fatalf("a ready release says it failed at %v", r.FailedAt)
		}
		first := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Second)
		at := first
		s.Now = func() time.Time { return at }
		for i, id := range []int64{a.ID, b.ID} {
			m, _ := s.Machine(ctx, []string{"a", "b"}[i])
			sentReport(t, s, id, &models.Report{Generation: m.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
				Reason: models.RolledBackReason("1.6.0", "1.0.0", fmt.Sprintf("its host exited 5 times in a row on %s", m.Name))})
			at = at.Add(time.Hour)
		}
		r := releaseOf(t, s, "1.6.0")
		t.Logf("1.6.0: %s at %v: %s", r.State, r.FailedAt, r.Failure)
		if r.State != models.ReleaseFailed || r.FailedAt == nil || !r.FailedAt.Equal(first) || !strings.Contains(r.Failure, "on a") {
			t.Fatalf("1.6.0 is %s, failed at %v (want %v), why %q (want a's)", r.State, r.FailedAt, first, r.Failure)
		}
	})
}
