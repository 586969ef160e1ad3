package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRollout_RolledBackAfterUpgraded: the trial host's upgraded report
// is accepted (the rollout of its one machine done, the fleet default
// moved), then its launcher rolls it back anyway (killed before the marker
// was written, or the launcher's own deadline first). The rolled_back
// report that follows fails the machine's upgrade and the release, and
// the fleet default goes back.
func TestRollout_RolledBackAfterUpgraded(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		applied(t, s, "m1", 1) // the old host applies the generation naming 1.5.0
		// The trial host (1.5.0) polls and reports upgraded; the controller accepts it.
		upgradedTo(t, s, "m1", "1.5.0")
		// Its launcher rolls it back all the same; the restored host reports so.
		if err := s.RecordHostInfo(ctx, m1.ID, "1.0.0", "1"); err != nil {
			t.Fatal(err)
		}
		m, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: m.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: models.RolledBackReason("1.5.0", "1.0.0", "it exited before completing a reconcile (killed by signal 9)")})
		ro, _ := s.Rollout(ctx, "1.5.0")
		rs, _ := s.Releases(ctx, 10, 0)
		def, _ := s.HostDefault(ctx)
		t.Logf("after the rollback: rollout %s (%q), m1 %s; release %s; fleet default %q", ro.State, ro.Reason, ro.Machines[0].State, rs[0].State, def)
		// The host now refuses 1.5.0's digest for good and never says so again;
		// it applies its next generation.
		applied(t, s, "m1", 1)
		m, _ = s.Machine(ctx, "m1")
		now := time.Now()
		st := s.Rules.State(m, &now, now)
		t.Logf("m1 after its next apply: state %s (host %s, target %s, last %s %q)", st, m.HostVersion, m.TargetHostVersion, m.LastOutcome, m.LastReason)
		if ro.Machines[0].State == models.UpgradeUpgraded || rs[0].State != models.ReleaseFailed || def == "1.5.0" || st == models.StateUpgrading {
			t.Fatalf("a host that rolled back 1.5.0 is counted upgraded (rollout %s, machine %s), the release is %s, the fleet default %q, and m1 shows %q with no why",
				ro.State, ro.Machines[0].State, rs[0].State, def, st)
		}
	})
}

// TestRollout_HaltStopsTheOtherCanaries: two canaries go at once; one
// rolls back, which halts the rollout and fails the release. The other's
// target goes back too (stopped): kept, it would name a release no
// declaration carries any more (only ready ones are composed), and the
// machine would show upgrading for good.
func TestRollout_HaltStopsTheOtherCanaries(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "a"), fixture(t, s, "b")
		release(t, s, "1.5.0", "amd64", "1")
		if _, err := s.StartRollout(ctx, "test", "1.5.0", "2", 1, 600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.InsertReport(ctx, a.ID, &models.Report{Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: models.RolledBackReason("1.5.0", "1.0.0", "it exited before completing a reconcile (exit status 1)")}, nil); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		mb, _ := s.Machine(ctx, "b")
		got, fails, err := s.Compose(ctx, []int64{b.ID}, "ctl", newSigner())
		if err != nil || fails[b.ID] != nil {
			t.Fatalf("compose: %v %v", err, fails[b.ID])
		}
		var env models.Envelope
		var p models.DeclarationPayload
		decode(t, got[b.ID].Sealed(), &env)
		decode(t, env.Payload, &p)
		applied(t, s, "b", 1)
		mb, _ = s.Machine(ctx, "b")
		now := time.Now()
		st := s.Rules.State(mb, &now, now)
		var rmB string
		for _, rm := range ro.Machines {
			if rm.Machine == "b" {
				rmB = rm.State
			}
		}
		t.Logf("rollout %s (%q); b: rollout row %s, target %q, declaration's host %+v, state %s", ro.State, ro.Reason, rmB, mb.TargetHostVersion, p.Host, st)
		if st == models.StateUpgrading && p.Host == nil {
			t.Fatalf("b is %q to %s, which no declaration names any more (halted rollout, failed release): it never moves", st, mb.TargetHostVersion)
		}
	})
}

// TestRollout_TheNewestIsShown: a version rolled out again after a halt
// shows, watches, pauses and cancels its newest rollout. gorm's Order
// ignored the newest-first order (a clause.Expr) and First ordered by id,
// so the view and the actions took the oldest: a retry that went on was
// shown halted and could not be cancelled.
func TestRollout_TheNewestIsShown(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := fixture(t, s, "a")
		release(t, s, "1.5.0", "amd64", "1")
		first, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.InsertReport(ctx, a.ID, &models.Report{Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: models.RolledBackReason("1.5.0", "1.0.0", "it exited before completing a reconcile (exit status 1)")}, nil); err != nil {
			t.Fatal(err)
		}
		// The release is ready again (as if uploaded anew) for a second rollout.
		if err := s.DB().Exec("UPDATE host_releases SET state = ?, failure = '' WHERE version = '1.5.0'", models.ReleaseReady).Error; err != nil {
			t.Fatal(err)
		}
		second, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 600)
		if err != nil {
			t.Fatal(err)
		}
		ro, err := s.Rollout(ctx, "1.5.0")
		if err != nil || ro.ID != second.ID || ro.ID == first.ID {
			t.Fatalf("shown rollout %d (%v), want the newest %d (the first was %d)", ro.ID, err, second.ID, first.ID)
		}
		ro, err = s.SetRolloutState(ctx, "test", "1.5.0", "cancel")
		if err != nil || ro.ID != second.ID || ro.State != models.RolloutCancelled {
			t.Fatalf("cancel: %+v %v", ro, err)
		}
	})
}

// "a rollback of another release"), so rolledBackAfterUpgraded never runs.
func TestRollout_RolledBackAfterUpgradedDuringTheNext(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1")
		release(t, s, "1.6.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		applied(t, s, "m1", 1)
		upgradedTo(t, s, "m1", "1.5.0")
		// 1.5.0 is done and the default; the next rollout starts.
		rollOut(t, s, "1.6.0")
		// The host's launcher had rolled 1.5.0 back; its report arrives now.
		rolledBackFrom(t, s, m1.ID, "1.5.0", "it exited before completing a reconcile (killed by signal 9)")
		ro, _ := s.Rollout(ctx, "1.5.0")
		rs, _ := s.Releases(ctx, 10, 0)
		def, _ := s.HostDefault(ctx)
		st := map[string]string{}
		for _, r := range rs {
			st[r.Version] = r.State
		}
		t.Logf("rollout 1.5.0 %s, m1 %s; releases %v; default %q", ro.State, ro.Machines[0].State, st, def)
		if ro.Machines[0].State == models.UpgradeUpgraded || st["1.5.0"] != models.ReleaseFailed {
			t.Fatalf("m1 rolled 1.5.0 back after its upgraded report, but 1.5.0's rollout says it upgraded and the release is %s", st["1.5.0"])
		}
		// Its upgrade in 1.6.0's rollout goes on: the late report of 1.5.0
		// put its target back to 1.5.0's previous, and 1.6.0, never tried,
		// failed at the deadline.
		if m, _ := s.Machine(ctx, "m1"); m.TargetHostVersion != "1.6.0" || st["1.6.0"] != models.ReleaseReady {
			t.Fatalf("after 1.5.0's late rollback, m1's target is %q and 1.6.0 is %s, want 1.6.0 and ready", m.TargetHostVersion, st["1.6.0"])
		}
	})
}

// at the deadline, the release is marked failed, and its target goes back.
func TestRollout_UpgradedWhilePausedCounts(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1")
		if _, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 1); err != nil {
			t.Fatal(err)
		}
		applied(t, s, "m1", 1)
		if _, err := s.SetRolloutState(ctx, "test", "1.5.0", "pause"); err != nil {
			t.Fatal(err)
		}
		upgradedTo(t, s, "m1", "1.5.0")
		// Past its deadline (1 s) before it resumes.
		if err := s.DB().Exec("UPDATE rollout_machines SET started_at = ?", time.Now().Add(-time.Hour).UTC()).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetRolloutState(ctx, "test", "1.5.0", "resume"); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		m, _ := s.Machine(ctx, "m1")
		t.Logf("rollout %s %q; m1 %s; m1 runs %s, target %q", ro.State, ro.Reason, ro.Machines[0].State, m.HostVersion, m.TargetHostVersion)
		if ro.State == models.RolloutHalted {
			t.Fatalf("a machine whose upgraded report was accepted failed the release")
		}
	})
}

// carries) and, after its next apply, shows upgrading for good.
func TestRollout_RolledBackAfterUpgradedInAHaltedOne(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "a"), fixture(t, s, "b")
		release(t, s, "1.5.0", "amd64", "1")
		if _, err := s.StartRollout(ctx, "test", "1.5.0", "2", 1, 600); err != nil {
			t.Fatal(err)
		}
		applied(t, s, "a", 1)
		upgradedTo(t, s, "a", "1.5.0")
		if _, err := s.InsertReport(ctx, b.ID, &models.Report{Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: models.RolledBackReason("1.5.0", "1.0.0", "it exited before completing a reconcile (exit status 1)")}, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		// a's launcher rolls back as well.
		rolledBackFrom(t, s, a.ID, "1.5.0", "it exited before completing a reconcile (killed by signal 9)")
		applied(t, s, "a", 1)
		ro, _ := s.Rollout(ctx, "1.5.0")
		m, _ := s.Machine(ctx, "a")
		now := time.Now()
		st := s.Rules.State(m, &now, now)
		var rowA string
		for _, rm := range ro.Machines {
			if rm.Machine == "a" {
				rowA = rm.State
			}
		}
		t.Logf("rollout %s; a: row %s, host %s, target %q, state %s", ro.State, rowA, m.HostVersion, m.TargetHostVersion, st)
		if st == models.StateUpgrading {
			t.Fatalf("a runs 1.0.0, its target is still the failed 1.5.0 (row %q): upgrading for good", rowA)
		}
	})
}

// The same after the operator cancelled the rollout.
func TestRollout_RolledBackAfterUpgradedInACancelledOne(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := fixture(t, s, "a")
		fixture(t, s, "b")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		applied(t, s, "a", 1)
		upgradedTo(t, s, "a", "1.5.0")
		if _, err := s.SetRolloutState(ctx, "test", "1.5.0", "cancel"); err != nil {
			t.Fatal(err)
		}
		rolledBackFrom(t, s, a.ID, "1.5.0", "it exited before completing a reconcile (killed by signal 9)")
		applied(t, s, "a", 1)
		ro, _ := s.Rollout(ctx, "1.5.0")
		rs, _ := s.Releases(ctx, 10, 0)
		m, _ := s.Machine(ctx, "a")
		now := time.Now()
		st := s.Rules.State(m, &now, now)
		t.Logf("rollout %s; a: row %s, host %s, target %q, state %s; release %s", ro.State, ro.Machines[0].State, m.HostVersion, m.TargetHostVersion, st, rs[0].State)
		if st == models.StateUpgrading || rs[0].State != models.ReleaseFailed {
			t.Fatalf("a rolled 1.5.0 back after its upgraded report: state %s, release %s", st, rs[0].State)
		}
	})
}

// upgradedTo: the named machine's trial host polls as version and its
// upgraded report (from 1.0.0) is accepted.
func upgradedTo(t *testing.T, s *store.Store, name, version string) {
	t.Helper()
	ctx := context.Background()
	m, _ := s.Machine(ctx, name)
	if err := s.RecordHostInfo(ctx, m.ID, version, "1"); err != nil {
		t.Fatal(err)
	}
	m, _ = s.Machine(ctx, name)
	sentReport(t, s, m.ID, &models.Report{Generation: m.AppliedGeneration, Outcome: models.OutcomeUpgraded, HostVersion: version,
		Reason: "upgraded from 1.0.0 to " + version})
}

// rolledBackFrom: the machine's host, put back to 1.0.0 by its launcher,
// polls and reports the rollback from version, why.
func rolledBackFrom(t *testing.T, s *store.Store, id int64, from, why string) {
	t.Helper()
	ctx := context.Background()
	if err := s.RecordHostInfo(ctx, id, "1.0.0", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertReport(ctx, id, &models.Report{Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
		Reason: models.RolledBackReason(from, "1.0.0", why)}, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
}

// TestRollout_AMachineRunningTheReleaseIsUpgradedAtOnce: m1's host runs
// 1.5.0 already (a plan's host step put it there) when a fleet rollout of
// 1.5.0 begins. Its host has nothing to do and never reports an upgrade:
// m1 is not the canary (it would try nothing), and when its wave comes it
// is upgraded at once, with why — where it waited for the deadline and
// then failed a good release fleet-wide.
func TestRollout_AMachineRunningTheReleaseIsUpgradedAtOnce(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		fixture(t, s, "m2")
		release(t, s, "1.5.0", "amd64", "1")
		if err := s.RecordHostInfo(ctx, m1.ID, "1.5.0", "1"); err != nil {
			t.Fatal(err)
		}
		ro, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 600)
		if err != nil {
			t.Fatal(err)
		}
		state := map[string]models.RolloutMachine{}
		for _, m := range ro.Machines {
			state[m.Machine] = m
		}
		if m := state["m2"]; m.Wave != 0 || m.State != models.UpgradeUpgrading || ro.State != models.RolloutRunning {
			t.Fatalf("the rollout (%s) did not take m2, which does not run 1.5.0, as its canary: %+v", ro.State, m)
		}
		upgradedTo(t, s, "m2", "1.5.0")
		ro, _ = s.Rollout(ctx, "1.5.0")
		for _, m := range ro.Machines {
			if m.Machine == "m1" && (m.State != models.UpgradeUpgraded || m.Reason != "its host ran 1.5.0 already" || m.FinishedAt == nil) {
				t.Fatalf("m1, running 1.5.0: %+v", m)
			}
		}
		rs, _ := s.Releases(ctx, 10, 0)
		if def, _ := s.HostDefault(ctx); ro.State != models.RolloutDone || rs[0].State == models.ReleaseFailed || def != "1.5.0" {
			t.Fatalf("rollout %s (%q), release %s, fleet default %q", ro.State, ro.Reason, rs[0].State, def)
		}
	})
}

// TestSends_AReleaseRefusalIsNotTheDeclarationsOutcome: a host applies the
// generation that names a host release, then refuses the release (it does
// not run under its launcher) in a report naming the same send. The send
// is shown applied — its declaration was — not refused.
func TestSends_AReleaseRefusalIsNotTheDeclarationsOutcome(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		m, _ := s.Machine(ctx, "m1")
		r := &models.Report{Generation: m.Generation, Outcome: models.OutcomeApplied}
		sentReport(t, s, m1.ID, r)
		refusal := &models.Report{Send: r.Send, Generation: m.Generation, Outcome: models.OutcomeRefused,
			Reason: models.ReleaseRefused("1.5.0", "this host does not run under `mesh-host launch`")}
		if _, err := s.InsertReport(ctx, m1.ID, refusal, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		sends, err := s.Sends(ctx, m1.ID, 10, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, sd := range sends {
			if sd.ID == r.Send && sd.Outcome != models.OutcomeApplied {
				t.Fatalf("the send of generation %d shown %s: %s", sd.Generation, sd.Outcome, sd.Reason)
			}
		}
	})
}

// TestRollout_AHaltedRolloutsUnreachedMachinesAreWithdrawn: the canary
// rolls back, the rollout halts; the machines it never reached were
// listed "pending", as if still to come. They are said withdrawn, with
// why, as a plan's unreached steps are.
func TestRollout_AHaltedRolloutsUnreachedMachinesAreWithdrawn(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a := fixture(t, s, "a")
		fixture(t, s, "b")
		fixture(t, s, "c")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		if _, err := s.InsertReport(ctx, a.ID, &models.Report{Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: models.RolledBackReason("1.5.0", "1.0.0", "it exited before completing a reconcile (exit status 1)")}, nil); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		if ro.State != models.RolloutHalted {
			t.Fatalf("rollout %s", ro.State)
		}
		for _, m := range ro.Machines {
			if m.Machine != "a" && (m.State != models.UpgradeWithdrawn || m.Reason != "never reached: the rollout halted first") {
				t.Fatalf("%s: %s %q", m.Machine, m.State, m.Reason)
			}
		}
	})
}

// TestRollout_ARevokedMachineIsNotWaitedFor: a machine revoked before a
// rollout is not in it; one revoked during it is withdrawn, saying so,
// and the rollout finishes without it. Waited for, its silence failed a
// good release at the deadline, blaming its host.
func TestRollout_ARevokedMachineIsNotWaitedFor(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a")
		fixture(t, s, "b")
		fixture(t, s, "c")
		if _, err := s.RevokeMachine(ctx, "user:admin", "c", "disk stolen"); err != nil {
			t.Fatal(err)
		}
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		if _, err := s.RevokeMachine(ctx, "user:admin", "b", "decommissioned"); err != nil {
			t.Fatal(err)
		}
		applied(t, s, "a", 1)
		upgradedTo(t, s, "a", "1.5.0")
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		states := map[string]string{}
		for _, m := range ro.Machines {
			states[m.Machine] = m.State + " " + m.Reason
		}
		if ro.State != models.RolloutDone || len(ro.Machines) != 2 || !strings.HasPrefix(states["a"], models.UpgradeUpgraded) ||
			states["b"] != "withdrawn revoked (decommissioned): nothing is sent to it, so the rollout does not reach it" {
			t.Fatalf("rollout %s (%s): %v", ro.State, ro.Reason, states)
		}
		if r := releaseOf(t, s, "1.5.0"); r.State == models.ReleaseFailed {
			t.Fatalf("the release failed: %s", r.Failure)
		}
	})
}

// TestRollout_NoMachineTriedItIsNotTheDefault: a rollout whose every
// machine was withdrawn (revoked) halts saying no machine tried it: it
// ended done and made the release the fleet default, run by no host.
func TestRollout_NoMachineTriedItIsNotTheDefault(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		if _, err := s.RevokeMachine(ctx, "user:admin", "a", "stolen"); err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		def, _ := s.HostDefault(ctx)
		if def == "1.5.0" || ro.State != models.RolloutHalted || !strings.Contains(ro.Reason, "no machine tried it") {
			t.Fatalf("rollout %s (%q), fleet default %q", ro.State, ro.Reason, def)
		}
		if r := releaseOf(t, s, "1.5.0"); r.State == models.ReleaseFailed {
			t.Fatalf("the release failed: %s", r.Failure)
		}
	})
}

// TestRollout_AWithdrawnCanaryIsReplaced: the one canary revoked before it
// tried the release gives its place to the next machine; the rest wait
// for it (they were all reached at once, the release tried by none).
func TestRollout_AWithdrawnCanaryIsReplaced(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a")
		fixture(t, s, "b")
		fixture(t, s, "c")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0") // one canary (a), then b and c
		if _, err := s.RevokeMachine(ctx, "user:admin", "a", "stolen"); err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		got := map[string]string{}
		for _, m := range ro.Machines {
			got[m.Machine] = fmt.Sprintf("wave %d %s", m.Wave, m.State)
		}
		if got["a"] != "wave 0 withdrawn" || got["b"] != "wave 0 upgrading" || got["c"] != "wave 1 pending" {
			t.Fatalf("rollout %s: %v", ro.State, got)
		}
	})
}

// TestRollout_AReplacementCanaryIsAMachineHeardFrom: a (heard from), b
// (quiet for an hour), c (heard from): the canary is a; b and c wait.
// a is revoked; its replacement is picked by machine id, so b, the quiet
// one, becomes the canary, though c was heard from: beginRollout puts
// machines heard from first because an offline canary waits out the
// deadline before it is withdrawn and replaced.
func TestRollout_AReplacementCanaryIsAMachineHeardFrom(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b, c := fixture(t, s, "a"), fixture(t, s, "b"), fixture(t, s, "c")
		for _, m := range []*models.Machine{a, c} {
			if err := s.DB().Exec("UPDATE machines SET last_seen = ? WHERE id = ?", time.Now(), m.ID).Error; err != nil {
				t.Fatal(err)
			}
		}
		if err := s.DB().Exec("UPDATE machines SET last_seen = ? WHERE id = ?", time.Now().Add(-time.Hour), b.ID).Error; err != nil {
			t.Fatal(err)
		}
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		if _, err := s.RevokeMachine(ctx, "user:admin", "a", "stolen"); err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		got := map[string]string{}
		for _, m := range ro.Machines {
			got[m.Machine] = fmt.Sprintf("wave %d %s", m.Wave, m.State)
		}
		if got["c"] != "wave 0 upgrading" {
			t.Fatalf("replacement canary: %v (b has been quiet for an hour, c was heard from)", got)
		}
	})
}

// TestRollout_ADeletedMachineIsNotLeftUpgrading: a paused
// rollout's canary, upgrading, is deleted; the rollout is cancelled. Its
// place says "upgrading" for ever on an ended rollout.
func TestRollout_ADeletedMachineIsNotLeftUpgrading(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a")
		fixture(t, s, "b")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		if _, err := s.SetRolloutState(ctx, "user:olga", "1.5.0", "pause"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMachine(ctx, "user:admin", "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetRolloutState(ctx, "user:olga", "1.5.0", "cancel"); err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		for _, m := range ro.Machines {
			if m.State == models.UpgradeUpgrading {
				t.Fatalf("cancelled rollout shows %s %s", m.Machine, m.State)
			}
		}
	})
}

// armFixture enrols an arm64 machine with the fixture's module.
func armFixture(t *testing.T, s *store.Store, name string) *models.Machine {
	t.Helper()
	m := fixture(t, s, name)
	if err := s.DB().Exec("UPDATE machines SET arch = 'arm64' WHERE id = ?", m.ID).Error; err != nil {
		t.Fatal(err)
	}
	m.Arch = "arm64"
	return m
}

// composedHost is the host release m's next declaration names ("" for none).
func composedHost(t *testing.T, s *store.Store, m *models.Machine) string {
	t.Helper()
	ctx := context.Background()
	cur, err := s.Machine(ctx, m.Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetVariables(ctx, "test", m.Name, &cur.Generation, map[string]string{"port": fmt.Sprint(1000 + cur.Generation)}); err != nil {
		t.Fatal(err)
	}
	got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl", newSigner())
	if err != nil || fails[m.ID] != nil {
		t.Fatalf("compose: %v %v", err, fails[m.ID])
	}
	var env models.Envelope
	var p models.DeclarationPayload
	decode(t, got[m.ID].Sealed(), &env)
	decode(t, env.Payload, &p)
	if p.Host == nil {
		return ""
	}
	return p.Host.Version + " " + p.Host.Arch
}

// TestRollout_TheDefaultReachesOnlyTriedPlatforms: 1.5.0 was rolled out
// to the amd64 machines and is the fleet default; its arm64 build is
// uploaded after. The arm64 machines are not given it at their next
// generation, untried and all at once: it reaches them through a rollout,
// canary first — whose canary is an arm64 machine, not an amd64 one that
// runs 1.5.0 already — and the default reaches them once that is done.
func TestRollout_TheDefaultReachesOnlyTriedPlatforms(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a1")
		b1 := armFixture(t, s, "b1")
		armFixture(t, s, "b2")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		upgradedTo(t, s, "a1", "1.5.0")
		if def, _ := s.HostDefault(ctx); def != "1.5.0" {
			t.Fatalf("fleet default %q", def)
		}
		release(t, s, "1.5.0", "arm64", "1")
		if got := composedHost(t, s, b1); got != "" {
			t.Fatalf("b1 (arm64) is given %q, untried on its platform, outside any rollout", got)
		}
		ro, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 600)
		if err != nil {
			t.Fatal(err)
		}
		state := map[string]models.RolloutMachine{}
		for _, m := range ro.Machines {
			state[m.Machine] = m
		}
		if c := ro.Machines[0]; c.Wave != 0 || c.Machine == "a1" || c.State != models.UpgradeUpgrading {
			t.Fatalf("the canary is %+v; want an arm64 machine upgrading (a1 runs 1.5.0 already): %+v", c, ro.Machines)
		}
		// A failed trial puts back what the machine ran before: nothing
		// named, where the default had not reached it.
		if p := state[ro.Machines[0].Machine].Previous; p != "" {
			t.Fatalf("the canary's target before: %q", p)
		}
		for _, n := range []string{"b1", "b2"} {
			if st, _ := s.Rollout(ctx, "1.5.0"); st.State == models.RolloutRunning {
				upgradedTo(t, s, n, "1.5.0")
				if err := s.StepRollouts(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		ro, _ = s.Rollout(ctx, "1.5.0")
		if ro.State != models.RolloutDone {
			t.Fatalf("the second rollout: %s %q %+v", ro.State, ro.Reason, ro.Machines)
		}
		if got := composedHost(t, s, b1); got != "1.5.0 arm64" {
			t.Fatalf("b1 after arm64's rollout: %q", got)
		}
	})
}

// TestRollout_AnotherPlatformJoinsTheRunningRollout: the arm64 build of
// 1.5.0 uploaded while its amd64 rollout runs joins it — its machines
// with a canary of their own, started at once, the rest waiting for it —
// where it was refused, "another host rollout is running".
func TestRollout_AnotherPlatformJoinsTheRunningRollout(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a1")
		fixture(t, s, "a2")
		armFixture(t, s, "b1")
		armFixture(t, s, "b2")
		release(t, s, "1.5.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		release(t, s, "1.5.0", "arm64", "1")
		ro, err := s.Rollout(ctx, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		waves := map[string]string{}
		for _, m := range ro.Machines {
			waves[m.Machine] = fmt.Sprintf("%d %s", m.Wave, m.State)
		}
		t.Logf("rollout %s: %v", ro.State, waves)
		if len(ro.Machines) != 4 || waves["b1"] != "0 upgrading" || waves["b2"] != "1 pending" || waves["a1"] != "0 upgrading" {
			t.Fatalf("the arm64 machines did not join the running rollout with a canary of their own: %v", waves)
		}
		// The amd64 canary's success does not let arm64's second machine go
		// before its own canary has tried the binary.
		upgradedTo(t, s, "a1", "1.5.0")
		ro, _ = s.Rollout(ctx, "1.5.0")
		for _, m := range ro.Machines {
			if m.Machine == "b2" && m.State != models.UpgradePending {
				t.Fatalf("b2 went before arm64's canary upgraded: %+v", ro.Machines)
			}
		}
	})
}

// TestRollout_APlatformNoMachineRanIsNotTried: a rollout done marks the
// releases of the platforms its machines upgraded on, not one released
// for a platform none of them runs: a machine of that platform enrolled
// later would have been given it untried.
func TestRollout_APlatformNoMachineRanIsNotTried(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "a1")
		release(t, s, "1.5.0", "amd64", "1")
		release(t, s, "1.5.0", "riscv64", "1")
		rollOut(t, s, "1.5.0")
		upgradedTo(t, s, "a1", "1.5.0")
		rs, err := s.Releases(ctx, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if tried := r.RolledOutAt != nil; tried != (r.Arch == "amd64") {
				t.Errorf("%s/%s: rolled out at %v", r.OS, r.Arch, r.RolledOutAt)
			}
		}
	})
}

// TestRollout_ACanaryThatNeverPolledFailsNoRelease: the canary a was last
// heard from before its upgrade started (it stopped polling minutes
// before, not yet offline). Its deadline ran out with no upgraded report,
// and the release was failed for good — "release a new version" — though
// a's host never had the declaration naming it. Now a is withdrawn, saying
// so, its target goes back, the release stays ready and the rollout goes
// on with b as its canary.
func TestRollout_ACanaryThatNeverPolledFailsNoRelease(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "a"), fixture(t, s, "b")
		if err := s.DB().Exec("UPDATE machines SET last_seen = ? WHERE id = ?", time.Now().Add(-2*time.Minute), a.ID).Error; err != nil {
			t.Fatal(err)
		}
		release(t, s, "1.5.0", "amd64", "1")
		if _, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 60); err != nil {
			t.Fatal(err)
		}
		// b polls on; a's upgrade started (pick a as the canary) and its
		// deadline ran out.
		if err := s.DB().Exec("UPDATE machines SET last_seen = ? WHERE id = ?", time.Now(), b.ID).Error; err != nil {
			t.Fatal(err)
		}
		ro, _ := s.Rollout(ctx, "1.5.0")
		canary := ""
		for _, m := range ro.Machines {
			if m.State == models.UpgradeUpgrading {
				canary = m.Machine
			}
		}
		if canary != "a" {
			// a is picked as a machine heard from lately (2 minutes is
			// not offline); b was not yet heard from at the start.
			t.Fatalf("the canary is %q, want a: %+v", canary, ro.Machines)
		}
		if err := s.DB().Exec("UPDATE rollout_machines SET started_at = ? WHERE machine_id = ?", time.Now().Add(-2*time.Minute), a.ID).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, _ = s.Rollout(ctx, "1.5.0")
		got := map[string]string{}
		for _, m := range ro.Machines {
			got[m.Machine] = m.State + ": " + m.Reason
		}
		if ro.State != models.RolloutRunning || !strings.HasPrefix(got["a"], "withdrawn: no upgraded report within 1m0s, and no poll from its host since its upgrade started") ||
			!strings.HasPrefix(got["b"], "upgrading") {
			t.Fatalf("rollout %s (%s): %v", ro.State, ro.Reason, got)
		}
		if r := releaseOf(t, s, "1.5.0"); r.State == models.ReleaseFailed {
			t.Fatalf("release 1.5.0 failed over a canary that never polled: %s", r.Failure)
		}
		if m := composedHost(t, s, a); strings.HasPrefix(m, "1.5.0 ") {
			t.Fatal("a's declaration still names 1.5.0")
		}
	})
}

// TestRollout_AFailedReleaseTakesBackTheMachinesOnIt: 1.5.0 and then 1.6.0
// are rolled out to a and b, both done. a's host then crash-loops on
// 1.6.0 and its launcher rolls it back: the release fails, the fleet
// default goes back. b ran 1.6.0 on, its target naming a failed release
// that no declaration carries, reading current — until its own host
// restarted into it. b's target now goes back to the release it left.
func TestRollout_AFailedReleaseTakesBackTheMachinesOnIt(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "a"), fixture(t, s, "b")
		for _, v := range []string{"1.5.0", "1.6.0"} {
			rolledOutToAll(t, s, v, "a", "b")
			if ro, _ := s.Rollout(ctx, v); ro.State != models.RolloutDone {
				t.Fatalf("rollout of %s: %s %+v", v, ro.State, ro.Machines)
			}
		}
		m, _ := s.Machine(ctx, "a")
		sentReport(t, s, a.ID, &models.Report{Generation: m.AppliedGeneration, Outcome: models.OutcomeRolledBack, HostVersion: "1.5.0",
			Reason: models.RolledBackReason("1.6.0", "1.5.0", "it was kept after its trial, then its host exited 5 times in a row")})
		if r := releaseOf(t, s, "1.6.0"); r.State != models.ReleaseFailed {
			t.Fatalf("release 1.6.0 is %s", r.State)
		}
		mb, _ := s.Machine(ctx, "b")
		if mb.TargetHostVersion != "1.5.0" || !strings.HasPrefix(composedHost(t, s, b), "1.5.0 ") {
			t.Fatalf("b runs the failed 1.6.0 with its target %q (declaration names %q), want back to 1.5.0", mb.TargetHostVersion, composedHost(t, s, b))
		}
	})
}
