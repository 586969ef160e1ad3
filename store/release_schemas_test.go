package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// release stores a host release of a few bytes that decodes schemas.
// rollOut starts a rollout of version with one canary, one in flight and
// a ten-minute deadline.
func rollOut(t *testing.T, s *store.Store, version string) {
	t.Helper()
	if _, err := s.StartRollout(context.Background(), "test", version, "1", 1, 600); err != nil {
		t.Fatal(err)
	}
}

func release(t *testing.T, s *store.Store, version, arch, schemas string) {
	t.Helper()
	ctx := context.Background()
	b, err := s.PutBlob(ctx, strings.NewReader("mesh-host "+version+" "+arch))
	if err != nil {
		t.Fatal(err)
	}
	r := &models.Release{Version: version, OS: "linux", Arch: arch, Digest: b.Digest, Size: b.Size, KeyID: "k1",
		Signature: []byte{1}, Schemas: schemas}
	if err := s.CreateRelease(ctx, "test", r, b); err != nil {
		t.Fatal(err)
	}
}

// releaseOf is the release of version as the store lists it.
func releaseOf(t *testing.T, s *store.Store, version string) models.Release {
	t.Helper()
	rs, err := s.Releases(context.Background(), 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Version == version {
			return r
		}
	}
	t.Fatalf("no release %s", version)
	return models.Release{}
}

// TestReleases_SchemasByMigration: a release stored before migration 0019
// (which recorded no schemas) decodes schema 1, the only one there was.
func TestReleases_SchemasByMigration(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			ctx := context.Background()
			s, err := store.Open(ctx, storetest.Config(t, d))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.MigrateTo(ctx, 18); err != nil {
				t.Fatal(err)
			}
			if err := s.DB().Exec(`INSERT INTO host_releases (version, os, arch, digest, size, key_id, signature, created_at)
				VALUES ('1.4.0', 'linux', 'amd64', 'sha256:00', 3, 'k1', ?, ?)`, []byte{1}, time.Now().UTC()).Error; err != nil {
				t.Fatal(err)
			}
			if _, err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			rs, err := s.Releases(ctx, 10, 0)
			if err != nil || len(rs) != 1 || rs[0].Schemas != "1" {
				t.Fatalf("releases after the migration: %+v %v; want one decoding 1", rs, err)
			}
		})
	}
}

// TestCompose_HeldBackNamesRelease: the held-back reason names the host
// release that decodes the schema the content needs: the machine's target
// when it does, else the newest ready release for its platform that does
// (never one for another platform, never one that decodes only 1).
func TestCompose_HeldBackNamesRelease(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1") // linux/amd64, host 1.0.0 decoding 1
		c := composeMachine(t, s, m.ID)
		sentReport(t, s, m.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied, HostVersion: "1.0.0"})

		release(t, s, "1.4.0", "amd64", "1")
		release(t, s, "1.5.0", "amd64", "1,2")
		release(t, s, "1.6.0", "amd64", "1")   // newer, but decodes only 1
		release(t, s, "1.7.0", "arm64", "1,2") // newer, another platform
		certModule(t, s)
		g := c.Generation
		if _, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{{Module: "mod"}, {Module: "web"}}); err != nil {
			t.Fatal(err)
		}
		held := composeMachine(t, s, m.ID)
		want := "held back: needs host schema 2; host 1.0.0 decodes 1; release 1.5.0 decodes 1,2"
		if held.HeldBack != want {
			t.Fatalf("reason = %q\nwant      %q", held.HeldBack, want)
		}
		if mm, _ := s.Machine(ctx, "m1"); mm.HeldBack != want {
			t.Fatalf("machine's held_back = %q", mm.HeldBack)
		}
	})
}

// TestCompose_HeldBackNoRelease: with no release that decodes the schema,
// the reason says so.
func TestCompose_HeldBackNoRelease(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		c := composeMachine(t, s, m.ID)
		sentReport(t, s, m.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied, HostVersion: "1.0.0"})
		release(t, s, "1.4.0", "amd64", "1")
		certModule(t, s)
		g := c.Generation
		if _, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{{Module: "mod"}, {Module: "web"}}); err != nil {
			t.Fatal(err)
		}
		want := "held back: needs host schema 2; host 1.0.0 decodes 1; no host release known to decode it"
		if held := composeMachine(t, s, m.ID); held.HeldBack != want {
			t.Fatalf("reason = %q\nwant      %q", held.HeldBack, want)
		}
	})
}

// TestRollout_TrialSchemas: a trial whose poll advertises other schemas
// than its release records fails the trial: the rollout halts with the
// reason, the release is failed and the machine's target goes back. A
// trial that advertises what the release records upgrades.
func TestRollout_TrialSchemas(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1,2")
		ro, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 600)
		if err != nil || ro.Machines[0].State != models.UpgradeUpgrading {
			t.Fatalf("start: %+v %v", ro, err)
		}
		before, _ := s.Machine(ctx, "m1")
		if before.TargetHostVersion != "1.5.0" {
			t.Fatalf("target = %q", before.TargetHostVersion)
		}
		if err := s.RecordHostInfo(ctx, m1.ID, "1.5.0", "1"); err != nil {
			t.Fatal(err)
		}
		ro, err = s.Rollout(ctx, "1.5.0")
		want := "machine m1 failed: its trial poll advertised schemas 1; release 1.5.0 records 1,2"
		if err != nil || ro.State != models.RolloutHalted || ro.Reason != want {
			t.Fatalf("rollout = %s %q (%v); want halted %q", ro.State, ro.Reason, err, want)
		}
		if rm := ro.Machines[0]; rm.State != models.UpgradeFailed || rm.Reason != "its trial poll advertised schemas 1; release 1.5.0 records 1,2" {
			t.Fatalf("machine in the rollout = %+v", rm)
		}
		rs, _ := s.Releases(ctx, 10, 0)
		if len(rs) != 1 || rs[0].State != models.ReleaseFailed || rs[0].Failure != want {
			t.Fatalf("release = %+v", rs)
		}
		after, _ := s.Machine(ctx, "m1")
		if after.TargetHostVersion != "" || after.Generation <= before.Generation || after.Schema != "1" {
			t.Fatalf("machine after the failed trial: target %q generation %d (was %d) schema %q",
				after.TargetHostVersion, after.Generation, before.Generation, after.Schema)
		}

		// A release whose trial advertises what it records upgrades.
		release(t, s, "1.6.0", "amd64", "1,2")
		rollOut(t, s, "1.6.0")
		if err := s.RecordHostInfo(ctx, m1.ID, "1.6.0", "2,1"); err != nil {
			t.Fatal(err)
		}
		cur, _ := s.Machine(ctx, "m1")
		sentReport(t, s, m1.ID, &models.Report{Generation: cur.Generation, Outcome: models.OutcomeUpgraded, HostVersion: "1.6.0"})
		ro, err = s.Rollout(ctx, "1.6.0")
		if err != nil || ro.Machines[0].State != models.UpgradeUpgraded || ro.State != models.RolloutDone {
			t.Fatalf("the matching trial: %+v %v", ro, err)
		}
	})
}

// TestRollout_TrialSchemasAtReport: the upgraded report is judged too, on
// the schemas last recorded for the machine, so a trial whose poll was
// not recorded anew still fails on a mismatch: the failure is kept, the
// report refused.
func TestRollout_TrialSchemasAtReport(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1") // its host advertised 1
		release(t, s, "1.5.0", "amd64", "1,2")
		rollOut(t, s, "1.5.0")
		cur, _ := s.Machine(ctx, "m1")
		err := trySentReport(t, s, m1.ID, &models.Report{Generation: cur.Generation, Outcome: models.OutcomeUpgraded, HostVersion: "1.5.0"})
		var tf *models.TrialFailedError
		if !errors.As(err, &tf) {
			t.Fatalf("upgraded report of the failed trial: %v; want it refused", err)
		}
		ro, err := s.Rollout(ctx, "1.5.0")
		if err != nil || ro.State != models.RolloutHalted || ro.Machines[0].State != models.UpgradeFailed ||
			ro.Machines[0].Reason != "its trial poll advertised schemas 1; release 1.5.0 records 1,2" {
			t.Fatalf("rollout = %+v %v", ro, err)
		}
	})
}

// TestRollout_UpgradedRefusedAfterFailedTrial pins a trial the controller
// failed on its schemas being kept by the launcher: the trial's poll
// advertised other schemas than its release records, the rollout halted
// and the target went back, yet its upgraded report was accepted (no
// machine was still upgrading), so the host wrote its reconcile marker
// and stayed on the failed release. The report is refused, with why, and
// audited; nothing of it is stored; the rolled_back report that follows
// is accepted.
func TestRollout_UpgradedRefusedAfterFailedTrial(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		release(t, s, "2.0.0", "amd64", "1") // the binary decodes 1,2
		rollOut(t, s, "2.0.0")
		if err := s.RecordHostInfo(ctx, m1.ID, "2.0.0", "1,2"); err != nil {
			t.Fatal(err)
		}
		reason := "its trial poll advertised schemas 1,2; release 2.0.0 records 1"
		if ro, _ := s.Rollout(ctx, "2.0.0"); ro.State != models.RolloutHalted || ro.Machines[0].Reason != reason {
			t.Fatalf("rollout = %+v", ro)
		}
		before, _, _ := s.Reports(ctx, m1.ID, 100, 0)
		cur, _ := s.Machine(ctx, "m1")

		err := trySentReport(t, s, m1.ID, &models.Report{Generation: cur.Generation, Outcome: models.OutcomeUpgraded,
			Reason: "upgraded from 1.0.0 to 2.0.0", HostVersion: "2.0.0"})
		var tf *models.TrialFailedError
		if !errors.As(err, &tf) || !errors.Is(err, models.ErrConflict) {
			t.Fatalf("upgraded report of the failed trial: %v; want it refused", err)
		}
		want := "upgraded report refused: the trial of host release 2.0.0 on machine m1 failed (" + reason +
			"); the launcher puts the previous release back"
		if err.Error() != want {
			t.Fatalf("refusal = %q\nwant      %q", err, want)
		}
		if after, _, _ := s.Reports(ctx, m1.ID, 100, 0); len(after) != len(before) {
			t.Fatalf("reports: %d before, %d after; a refused report is not stored", len(before), len(after))
		}
		es, _ := s.AuditEvents(ctx, 20, 0)
		found := false
		for _, e := range es {
			found = found || (e.Action == "report-refused" && e.Target == "machine/m1" && e.Detail == want)
		}
		if !found {
			t.Fatalf("no report-refused audit event: %+v", es)
		}
		if mm, _ := s.Machine(ctx, "m1"); mm.TargetHostVersion != "" || mm.LastOutcome == models.OutcomeUpgraded {
			t.Fatalf("machine after the refusal: target %q, last outcome %q", mm.TargetHostVersion, mm.LastOutcome)
		}

		// The launcher puts known-good back; that report is accepted.
		sentReport(t, s, m1.ID, &models.Report{Generation: cur.Generation, Outcome: models.OutcomeRolledBack,
			Reason: "rolled back from 2.0.0 to 1.0.0: the trial did not reconcile", HostVersion: "1.0.0"})
		if mm, _ := s.Machine(ctx, "m1"); mm.LastOutcome != models.OutcomeRolledBack {
			t.Fatalf("last outcome = %q", mm.LastOutcome)
		}
	})
}

// TestPlan_HaltsOnHeldBack: a plan for a build that needs schema 2 halts
// its tier at once on a machine whose host decodes only 1, with the
// held-back reason — once the step's generation is composed held back,
// not before (the reason on the machine may be an older generation's).
func TestPlan_HaltsOnHeldBack(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1") // mod build 1, host 1.0.0 decoding 1
		c := composeMachine(t, s, m.ID)
		sentReport(t, s, m.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied,
			HostVersion: "1.0.0", Running: map[string]models.RunningBuild{"mod": {Build: 1}}})
		release(t, s, "1.5.0", "amd64", "1,2")
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: certManifest}, nil); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil || v.State != models.PlanRunning || v.Steps[0].State != models.StepSent {
			t.Fatalf("plan: %+v %v", v, err)
		}
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning {
			t.Fatalf("halted before the step's generation was composed: %+v", v)
		}
		held := composeMachine(t, s, m.ID)
		reason := "held back: needs host schema 2; host 1.0.0 decodes 1; release 1.5.0 decodes 1,2"
		if held.HeldBack != reason {
			t.Fatalf("composed %q", held.HeldBack)
		}
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		v, _ = s.Plan(ctx, v.ID)
		want := "halted: tier 1 of 1: m1 " + reason
		if v.State != models.PlanHalted || v.Reason != want || v.Steps[0].State != models.StepFailed || v.Steps[0].Reason != "m1 "+reason {
			t.Fatalf("plan %s %q, step %+v; want halted %q", v.State, v.Reason, v.Steps[0], want)
		}
	})
}

// TestPlan_OlderHeldBackReasonDoesNotHalt: a machine held back for a
// build that needs schema 2 is not halted on by a plan whose build needs
// no later schema: its reason is the older generation's, and the step's
// generation composes in full.
func TestPlan_OlderHeldBackReasonDoesNotHalt(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		c := composeMachine(t, s, m.ID)
		sentReport(t, s, m.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied, HostVersion: "1.0.0"})
		certModule(t, s)
		g := c.Generation
		if _, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{{Module: "mod"}, {Module: "web"}}); err != nil {
			t.Fatal(err)
		}
		if held := composeMachine(t, s, m.ID); held.HeldBack == "" {
			t.Fatal("not held back")
		}
		if err := s.CreateBuild(ctx, "test", "web", &models.Build{Manifest: `{"resources": [{"name": "web", "kind": "service", "command": ["/bin/web"]}]}`}, nil); err != nil {
			t.Fatal(err)
		}
		v, err := s.CreatePlan(ctx, "test", "web", 2, 0, "")
		if err != nil || v.Steps[0].State != models.StepSent {
			t.Fatalf("plan: %+v %v", v, err)
		}
		if mm, _ := s.Machine(ctx, "m1"); mm.HeldBack == "" {
			t.Fatal("the machine's older reason is gone before the step's generation was composed; the test proves nothing")
		}
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning {
			t.Fatalf("halted on an older generation's reason: %s %q", v.State, v.Reason)
		}
		if full := composeMachine(t, s, m.ID); full.HeldBack != "" || full.Schema != 1 {
			t.Fatalf("the step's generation: schema %d, reason %q", full.Schema, full.HeldBack)
		}
		if err := s.StepPlans(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanRunning {
			t.Fatalf("halted: %s %q", v.State, v.Reason)
		}
	})
}

// TestRollout_TheOneThatReachedMachines: a version's rollout, as read, is
// the newest that reached a machine: a plan's host step for a release its
// machines already run makes an empty rollout, which hid the one that did
// the work (its machines no longer to be seen).
func TestRollout_TheOneThatReachedMachines(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1,2")
		first, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 600)
		if err != nil || len(first.Machines) != 1 {
			t.Fatalf("start: %+v %v", first, err)
		}
		empty := &models.Rollout{Version: "1.5.0", State: models.RolloutDone, CreatedBy: "plan", CreatedAt: time.Now(), PlanID: 7}
		if err := s.DB().Create(empty).Error; err != nil {
			t.Fatal(err)
		}
		ro, err := s.Rollout(ctx, "1.5.0")
		if err != nil || ro.ID != first.ID || len(ro.Machines) != 1 {
			t.Fatalf("rollout of 1.5.0: %+v %v; want rollout %d with its machine", ro, err, first.ID)
		}
	})
}

// TestRollout_RolledBackReasonKeptShowable: a host's rollback reason is
// kept on the rollout and the release clipped, its control characters
// escaped: it is shown on pages and printed by meshctl releases watch (a
// terminal escape in it once reached the operator's terminal whole).
func TestRollout_RolledBackReasonKeptShowable(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1,2")
		rollOut(t, s, "1.5.0")
		cur, _ := s.Machine(ctx, "m1")
		body, _ := json.Marshal(&models.Report{Generation: cur.Generation, Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: "exited\x1b]52;c;eA==\x07" + strings.Repeat("r", 100<<10)})
		r, err := models.DecodeReport(body) // the way every report comes in
		if err != nil {
			t.Fatal(err)
		}
		sentReport(t, s, m1.ID, r)
		ro, err := s.Rollout(ctx, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{ro.Reason, ro.Machines[0].Reason} {
			if len(w) > models.MaxReasonBytes+200 || strings.ContainsAny(w, "\x1b\x07") || !strings.Contains(w, `exited\x1b]52`) {
				t.Fatalf("kept %d bytes: %q…", len(w), w[:min(len(w), 60)])
			}
		}
	})
}

// TestRollout_RefusedByItsHostHalts: a host that will not take the
// release (it does not run under the launcher) says so; the rollout halts
// at once with its words, the machine's target goes back, and the release
// is not marked failed — nothing was learnt of it. The rollout waited out
// its deadline (ten minutes by default) saying "upgrading" with no reason.
func TestRollout_RefusedByItsHostHalts(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1,2")
		rollOut(t, s, "1.5.0")
		cur, _ := s.Machine(ctx, "m1")
		why := models.ReleaseRefused("1.5.0", "this host does not run under `mesh-host launch`")
		sentReport(t, s, m1.ID, &models.Report{Generation: cur.Generation, Outcome: models.OutcomeRefused, HostVersion: "1.0.0", Reason: why})
		ro, err := s.Rollout(ctx, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		if ro.State != models.RolloutHalted || !strings.Contains(ro.Reason, "machine m1 refused: "+why) ||
			ro.Machines[0].State != models.UpgradeRefused || ro.Machines[0].Reason != why {
			t.Fatalf("after the host refused the release: rollout %s %q, machine %+v", ro.State, ro.Reason, ro.Machines[0])
		}
		after, _ := s.Machine(ctx, "m1")
		if after.TargetHostVersion != "" || after.Generation <= cur.Generation {
			t.Fatalf("the machine's target is %q at generation %d (was %d): not put back", after.TargetHostVersion, after.Generation, cur.Generation)
		}
		if r := releaseOf(t, s, "1.5.0"); r.State == models.ReleaseFailed {
			t.Fatalf("a host's refusal marked the release failed: %q", r.Failure)
		}
	})
}

// TestRollout_ActedOnAsShown: pause, resume and cancel act on the rollout
// a version's view shows, not on a newer empty one a plan's host step
// made (its running rollout could be seen but not stopped).
func TestRollout_ActedOnAsShown(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1,2")
		rollOut(t, s, "1.5.0")
		empty := &models.Rollout{Version: "1.5.0", State: models.RolloutDone, CreatedBy: "plan", CreatedAt: time.Now(), PlanID: 7}
		if err := s.DB().Create(empty).Error; err != nil {
			t.Fatal(err)
		}
		ro, err := s.SetRolloutState(ctx, "test", "1.5.0", "cancel")
		if err != nil || ro.State != models.RolloutCancelled || len(ro.Machines) != 1 {
			t.Fatalf("cancel: %+v %v; want the running rollout cancelled", ro, err)
		}
	})
}

// TestRollout_CanaryIsAMachineHeardFrom: the canary is a machine whose
// host was heard from lately before one gone quiet (an offline canary
// only waits out the deadline), after those an admin flagged.
func TestRollout_CanaryIsAMachineHeardFrom(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		quiet, heard := fixture(t, s, "a-quiet"), fixture(t, s, "b-heard")
		if err := s.DB().Exec("UPDATE machines SET last_seen = ? WHERE id = ?", time.Now().Add(-time.Hour), quiet.ID).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Exec("UPDATE machines SET last_seen = ? WHERE id = ?", time.Now(), heard.ID).Error; err != nil {
			t.Fatal(err)
		}
		release(t, s, "1.5.0", "amd64", "1,2")
		ro, err := s.StartRollout(ctx, "test", "1.5.0", "1", 1, 600)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ro.Machines {
			if (m.Machine == "b-heard") != (m.State == models.UpgradeUpgrading) {
				t.Fatalf("rollout machines %+v: want b-heard the canary, upgrading", ro.Machines)
			}
		}
	})
}

// TestRollout_LateRollbackOfAnotherRelease: a rolled_back report of
// release 1.5.0 that reaches the controller late (it waited in the host's
// outbox while the host was cut off, and 1.5.0's rollout meanwhile ended)
// says nothing of the rollout of 1.6.0 running on that machine now: it
// failed it, and marked 1.6.0 — never tried — failed.
func TestRollout_LateRollbackOfAnotherRelease(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1 := fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1")
		release(t, s, "1.6.0", "amd64", "1")
		rollOut(t, s, "1.5.0")
		// The controller fails 1.5.0's trial on m1 (by its schemas here;
		// a deadline ends the same way).
		if err := s.RecordHostInfo(ctx, m1.ID, "1.5.0", "1,2"); err != nil {
			t.Fatal(err)
		}
		if ro, _ := s.Rollout(ctx, "1.5.0"); ro.State != models.RolloutHalted {
			t.Fatalf("1.5.0's rollout: %s", ro.State)
		}
		ro, err := s.StartRollout(ctx, "test", "1.6.0", "1", 1, 600)
		if err != nil || ro.Machines[0].State != models.UpgradeUpgrading {
			t.Fatalf("1.6.0's rollout: %+v %v", ro, err)
		}
		if _, err := s.InsertReport(ctx, m1.ID, &models.Report{Outcome: models.OutcomeRolledBack, HostVersion: "1.0.0",
			Reason: models.RolledBackReason("1.5.0", "1.0.0", "it did not complete a reconcile within 2m0s")}, nil); err != nil {
			t.Fatal(err)
		}
		if ro, _ = s.Rollout(ctx, "1.6.0"); ro.State != models.RolloutRunning {
			t.Fatalf("1.6.0's rollout is %s after a late rollback of 1.5.0: %q", ro.State, ro.Reason)
		}
		if r := releaseOf(t, s, "1.6.0"); r.State == models.ReleaseFailed {
			t.Fatalf("1.6.0 marked failed by a rollback of 1.5.0: %q", r.Failure)
		}
	})
}

// TestRollout_UnsendableHaltsWithoutFailingTheRelease: the machine being
// upgraded cannot be composed, so its declaration, which carries the
// release, never reaches it. The rollout halts at once saying why, and the
// release is not failed — nothing was learnt of it; it waited out its
// deadline "upgrading" with no reason, then failed the release.
func TestRollout_UnsendableHaltsWithoutFailingTheRelease(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "m1")
		release(t, s, "1.5.0", "amd64", "1,2")
		rollOut(t, s, "1.5.0")
		m1, _ := s.Machine(ctx, "m1")
		if err := s.DB().Exec("UPDATE machines SET compose_error = ?, compose_error_generation = ? WHERE id = ?", "variables: ${var.port}", m1.Generation, m1.ID).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.StepRollouts(ctx); err != nil {
			t.Fatal(err)
		}
		ro, err := s.Rollout(ctx, "1.5.0")
		if err != nil {
			t.Fatal(err)
		}
		if ro.State != models.RolloutHalted || !strings.Contains(ro.Reason, "cannot be composed, so the release cannot be sent to it: variables") ||
			ro.Machines[0].State != models.UpgradeFailed {
			t.Fatalf("rollout %s %q, machine %+v", ro.State, ro.Reason, ro.Machines[0])
		}
		if r := releaseOf(t, s, "1.5.0"); r.State == models.ReleaseFailed {
			t.Fatalf("an unsendable machine failed the release: %q", r.Failure)
		}
	})
}
