package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// rolloutActWhileStepped runs a person's act on the rollout of 1.5.0
// through instance a and, just before a writes the rollout's new state,
// other (another controller on the same store), as two instances do. It
// returns the act's error.
func rolloutActWhileStepped(t *testing.T, a *store.Store, action string, other func() error) error {
	t.Helper()
	ctx := context.Background()
	var once sync.Once
	done := make(chan struct{})
	name := "test:other-instance-" + action
	if err := a.DB().Callback().Update().Before("gorm:update").Register(name, func(db *gorm.DB) {
		up, ok := db.Statement.Dest.(map[string]any)
		if db.Statement.Table != "rollouts" || !ok {
			return
		}
		if _, ok := up["state"]; !ok {
			return
		}
		once.Do(func() {
			go func() {
				defer close(done)
				if err := other(); err != nil {
					t.Logf("the other instance: %v", err)
				}
			}()
			// The other instance waits on the act's lock (or, on SQLite,
			// its write turn): given a moment to do what it would.
			select {
			case <-done:
			case <-time.After(2 * time.Second):
			}
		})
	}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.DB().Callback().Update().Remove(name) }()
	_, err := a.SetRolloutState(ctx, "user:olga", "1.5.0", action)
	once.Do(func() { close(done) }) // the act wrote no state: the other never ran
	<-done
	return err
}

// twoInstances opens the store of each dialect twice, as two controllers.
func twoInstances(t *testing.T, f func(t *testing.T, a, b *store.Store)) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			cfg := storetest.Config(t, d)
			a := storetest.MustOpenConfig(t, cfg)
			b, err := store.Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			f(t, a, b)
		})
	}
}

// TestRollout_CancelWhileAnotherInstanceFinishesIt: a person cancelled a
// rollout on one instance while another's worker stepped it. The act read
// the rollout without a lock, so the step (FOR UPDATE SKIP LOCKED) found
// it free, finished it (done, the fleet default its release) and
// committed; the act then wrote "cancelled" over done: the person was told
// it was cancelled, and the fleet default had moved to its release.
func TestRollout_CancelWhileAnotherInstanceFinishesIt(t *testing.T) {
	twoInstances(t, func(t *testing.T, a, b *store.Store) {
		ctx := context.Background()
		fixture(t, a, "a")
		fixture(t, a, "b")
		release(t, a, "1.5.0", "amd64", "1")
		rollOut(t, a, "1.5.0")
		applied(t, a, "a", 1)
		upgradedTo(t, a, "a", "1.5.0") // b's upgrade begins
		if _, err := a.RevokeMachine(ctx, "user:admin", "b", "decommissioned"); err != nil {
			t.Fatal(err)
		}
		err := rolloutActWhileStepped(t, a, "cancel", func() error { return b.StepRollouts(ctx) })
		ro, _ := a.Rollout(ctx, "1.5.0")
		def, _ := a.HostDefault(ctx)
		if err == nil && (def == "1.5.0" || ro.State != models.RolloutCancelled) {
			t.Fatalf("the cancel was answered as done and the rollout reads %s (%q), the fleet default %q", ro.State, ro.Reason, def)
		}
	})
}

// TestRollout_TwoResumesOnTwoInstancesGoThroughOnce: a paused rollout
// resumed by two people at once on two instances was resumed twice, both
// answered done, two resume-rollout rows on the record for one resume.
func TestRollout_TwoResumesOnTwoInstancesGoThroughOnce(t *testing.T) {
	twoInstances(t, func(t *testing.T, a, b *store.Store) {
		ctx := context.Background()
		fixture(t, a, "m1")
		fixture(t, a, "m2")
		release(t, a, "1.5.0", "amd64", "1")
		if _, err := a.StartRollout(ctx, "test", "1.5.0", "1", 1, 600); err != nil {
			t.Fatal(err)
		}
		if _, err := a.SetRolloutState(ctx, "user:olga", "1.5.0", "pause"); err != nil {
			t.Fatal(err)
		}
		var errB error
		errA := rolloutActWhileStepped(t, a, "resume", func() error {
			_, errB = b.SetRolloutState(ctx, "user:ana", "1.5.0", "resume")
			return errB
		})
		evs, err := a.AuditEventsWhere(ctx, 100, 0, models.AuditFilter{})
		if err != nil {
			t.Fatal(err)
		}
		resumes := 0
		for _, e := range evs {
			if e.Action == "resume-rollout" {
				resumes++
			}
		}
		if errA == nil && errB == nil || resumes != 1 {
			t.Fatalf("one paused rollout resumed: A %v, B %v, %d resume-rollout rows on the record", errA, errB, resumes)
		}
	})
}

// TestRollout_PauseWhileAnotherInstanceHaltsIt: a person paused a rollout
// just as another instance's worker halted it (its canary ran out its
// deadline, the release failed); the pause was written over the halt, and
// a person's resume then sent the next wave a release that had failed.
func TestRollout_PauseWhileAnotherInstanceHaltsIt(t *testing.T) {
	twoInstances(t, func(t *testing.T, a, b *store.Store) {
		ctx := context.Background()
		fixture(t, a, "m1")
		fixture(t, a, "m2")
		release(t, a, "1.5.0", "amd64", "1")
		if _, err := a.StartRollout(ctx, "test", "1.5.0", "1", 1, 1); err != nil {
			t.Fatal(err)
		}
		ro, _ := a.Rollout(ctx, "1.5.0")
		applied(t, a, ro.Machines[0].Machine, 1) // its host applied the generation naming 1.5.0, and never upgraded
		if err := a.DB().Exec("UPDATE rollout_machines SET started_at = ?", time.Now().Add(-time.Hour).UTC()).Error; err != nil {
			t.Fatal(err)
		}
		err := rolloutActWhileStepped(t, a, "pause", func() error { return b.StepRollouts(ctx) })
		ro, _ = a.Rollout(ctx, "1.5.0")
		rel := releaseOf(t, a, "1.5.0")
		if err == nil && rel.State == models.ReleaseFailed && ro.State != models.RolloutHalted {
			t.Fatalf("the release failed and the rollout halted on the other instance, yet the pause was answered done and the rollout reads %s (%q)", ro.State, ro.Reason)
		}
	})
}
