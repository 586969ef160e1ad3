package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"mesh/models"
	"mesh/store"
)

// atMoment registers on a's gorm a callback (an update's, before
// gorm:update, or a query's, after gorm:query) that, the first time match
// says so, runs other (another instance's call) and gives it a moment to
// do what it would, as two controllers on one store do. The function
// returned removes the callback and waits for other to end.
func atMoment(t *testing.T, a *store.Store, query bool, match func(db *gorm.DB) bool, other func()) func() {
	t.Helper()
	var once sync.Once
	done := make(chan struct{})
	name := "test:report-race-" + t.Name()
	fn := func(db *gorm.DB) {
		if !match(db) {
			return
		}
		once.Do(func() {
			go func() {
				defer close(done)
				other()
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
			}
		})
	}
	var err error
	if query {
		err = a.DB().Callback().Query().After("gorm:query").Register(name, fn)
	} else {
		err = a.DB().Callback().Update().Before("gorm:update").Register(name, fn)
	}
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if query {
			_ = a.DB().Callback().Query().Remove(name)
		} else {
			_ = a.DB().Callback().Update().Remove(name)
		}
		once.Do(func() { close(done) })
		<-done
	}
}

// updateOf matches an Updates(map) on table whose "state" is state.
func updateOf(table, state string) func(db *gorm.DB) bool {
	return func(db *gorm.DB) bool {
		up, ok := db.Statement.Dest.(map[string]any)
		return ok && db.Statement.Table == table && up["state"] == state
	}
}

// TestRollout_UpgradedReportWhileAPersonCancels: a person cancelled a
// rollout on one instance while its canary's upgraded report was stored on
// another. The report read the rollout without a lock, so the cancel was
// written and answered done; the report then finished the rollout it had
// read as running, "done" over the cancel, and made the release the
// person had cancelled the fleet default.
func TestRollout_UpgradedReportWhileAPersonCancels(t *testing.T) {
	twoInstances(t, func(t *testing.T, a, b *store.Store) {
		ctx := context.Background()
		fixture(t, a, "m1")
		release(t, a, "1.5.0", "amd64", "1")
		rollOut(t, a, "1.5.0") // m1, its one machine, upgrading
		applied(t, a, "m1", 1)
		var errB error
		wait := atMoment(t, a, false, updateOf("rollout_machines", models.UpgradeUpgraded), func() {
			_, errB = b.SetRolloutState(ctx, "user:olga", "1.5.0", "cancel")
		})
		upgradedTo(t, a, "m1", "1.5.0")
		wait()
		ro, _ := a.Rollout(ctx, "1.5.0")
		def, _ := a.HostDefault(ctx)
		if errB == nil && (ro.State != models.RolloutCancelled || def == "1.5.0") {
			t.Fatalf("the cancel was answered done, yet the rollout reads %s (%q) and the fleet default is %q", ro.State, ro.Reason, def)
		}
	})
}

// TestPlan_CancelWhileAnotherInstanceHaltsItsHostStep: a person cancelled
// a plan on one instance while another's worker halted the plan's host
// step (its canary ran out its deadline) and failed its release; the
// cancel read the rollout without a lock and wrote "cancelled" over the
// halt, and the host step no longer said why it stopped.
func TestPlan_CancelWhileAnotherInstanceHaltsItsHostStep(t *testing.T) {
	twoInstances(t, func(t *testing.T, a, b *store.Store) {
		ctx := context.Background()
		_, _ = hostStepFixture(t, a)
		v, err := a.CreatePlan(ctx, "test", "mod", 2, 0, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		if v.HostStep == nil || v.HostStep.State != models.RolloutRunning {
			t.Fatalf("host step: %+v", v.HostStep)
		}
		if err := a.DB().Exec("UPDATE rollout_machines SET started_at = ?", time.Now().Add(-time.Hour).UTC()).Error; err != nil {
			t.Fatal(err)
		}
		wait := atMoment(t, a, false, updateOf("rollouts", models.RolloutCancelled), func() {
			if err := b.StepRollouts(ctx); err != nil {
				t.Logf("the other instance: %v", err)
			}
		})
		_, errA := a.SetPlanState(ctx, "user:olga", v.ID, "cancel")
		wait()
		ro, _ := a.Rollout(ctx, "1.5.0")
		rel := releaseOf(t, a, "1.5.0")
		if rel.State == models.ReleaseFailed && ro.State != models.RolloutHalted {
			t.Fatalf("the other instance halted the host step and failed its release, yet the host step reads %s (%q); the cancel: %v", ro.State, ro.Reason, errA)
		}
	})
}

// TestReports_UpgradeReportWhileANewerReport: a host's rolled_back report
// of generation 1 was stored on one instance while its applied report of
// generation 2 was stored on another. An upgrade's report read its machine
// without a lock and wrote the summary from that read, so the machine read
// rolled_back of generation 1 though it had finished 2 after — a state no
// order of the two reports gives.
func TestReports_UpgradeReportWhileANewerReport(t *testing.T) {
	twoInstances(t, func(t *testing.T, a, b *store.Store) {
		ctx := context.Background()
		id := fixtures(t, a, 1)[0]
		sentReport(t, a, id, &models.Report{Generation: 1, Outcome: models.OutcomeApplied})
		send1, send2 := recordSend(t, a, id, 1), recordSend(t, a, id, 2)
		wait := atMoment(t, a, true, func(db *gorm.DB) bool { return db.Statement.Table == "machines" }, func() {
			if _, err := b.InsertReport(ctx, id, &models.Report{Send: send2, Generation: 2, Outcome: models.OutcomeApplied}, []byte(`{}`)); err != nil {
				t.Errorf("the applied report: %v", err)
			}
		})
		_, err := a.InsertReport(ctx, id, &models.Report{Send: send1, Generation: 1, Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: models.RolledBackReason("1.5.0", "1.0.0", "it exited before completing a reconcile (exit status 1)")}, []byte(`{}`))
		wait()
		if err != nil {
			t.Fatal(err)
		}
		m, _ := a.Machine(ctx, "m0")
		if m.FinishedGen == 2 && (m.LastOutcome != models.OutcomeApplied || m.LastOutcomeGen != 2) {
			now := time.Now()
			t.Fatalf("after an applied report of generation 2, the machine reads last %s of generation %d (state %s)", m.LastOutcome, m.LastOutcomeGen, a.Rules.State(m, &now, now))
		}
	})
}

// TestRollout_UpgradedReportWhileAnotherInstanceFailsTheTrial: a canary's
// upgraded report came in on one instance just as another's worker failed
// its trial (its deadline ran out: the rollout halted, the release
// failed). The report was judged from rows read without a lock, before
// the other committed, and accepted: the host's launcher kept as
// known-good a release the controller had failed on that very machine.
func TestRollout_UpgradedReportWhileAnotherInstanceFailsTheTrial(t *testing.T) {
	twoInstances(t, func(t *testing.T, a, b *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, a, "m1")
		release(t, a, "1.5.0", "amd64", "1")
		rollOut(t, a, "1.5.0")
		applied(t, a, "m1", 1)
		if err := a.DB().Exec("UPDATE rollout_machines SET started_at = ?", time.Now().Add(-time.Hour).UTC()).Error; err != nil {
			t.Fatal(err)
		}
		if err := a.RecordHostInfo(ctx, m1.ID, "1.5.0", "1"); err != nil { // the trial host polled
			t.Fatal(err)
		}
		m, _ := a.Machine(ctx, "m1")
		send := recordSend(t, a, m1.ID, m.AppliedGeneration)
		judged := func(db *gorm.DB) bool {
			_, ok := db.Statement.Dest.(*[]models.RolloutMachine)
			return ok && db.Statement.Table == "rollout_machines"
		}
		wait := atMoment(t, a, true, judged, func() {
			if err := b.StepRollouts(ctx); err != nil {
				t.Logf("the other instance: %v", err)
			}
		})
		_, err := a.InsertReport(ctx, m1.ID, &models.Report{Send: send, Generation: m.AppliedGeneration, Outcome: models.OutcomeUpgraded,
			HostVersion: "1.5.0", Reason: "upgraded from 1.0.0 to 1.5.0"}, []byte(`{}`))
		wait()
		ro, _ := a.Rollout(ctx, "1.5.0")
		if err == nil && ro.Machines[0].State == models.UpgradeFailed {
			t.Fatalf("the trial was failed (m1 %s, release %s) and its upgraded report accepted all the same", ro.Machines[0].State, releaseOf(t, a, "1.5.0").State)
		}
	})
}
