package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// CreateRelease stores a host release naming its binary, a blob stored
// first (PutBlob).
func (s *Store) CreateRelease(ctx context.Context, actor string, r *models.Release, binary *models.Blob) error {
	return s.write(ctx, func(tx *Tx) error { return tx.CreateRelease(actor, r, binary) })
}

// CreateRelease is Store.CreateRelease inside tx.
func (tx *Tx) CreateRelease(actor string, r *models.Release, binary *models.Blob) error {
	r.CreatedAt, r.State = tx.s.Now(), models.ReleaseReady
	if err := needBlob(tx, r.Digest); err != nil {
		return err
	}
	if err := tx.Create(r).Error; err != nil {
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return fmt.Errorf("%w: host release %s for %s/%s already exists", models.ErrConflict, r.Version, r.OS, r.Arch)
		}
		return err
	}
	if err := audit(tx, actor, "create-host-release", "host-release/"+r.Version, fmt.Sprintf("%s/%s %s", r.OS, r.Arch, r.Digest)); err != nil {
		return err
	}
	return joinRollout(tx, actor, r)
}

// joinRollout adds r's platform to the fleet's rollout of its version when
// one runs or is paused: a release is uploaded a platform at a time, and
// the machines of a platform released while the rollout runs are taken
// in as its first were, canaries first (their binary is not the one the
// first canaries tried), not left to meet the version untried once it is
// the default.
func joinRollout(tx *Tx, actor string, r *models.Release) error {
	ro, err := fleetRolloutGoing(tx, r.Version)
	if err != nil || ro == nil {
		return err
	}
	var ms []models.Machine
	if err := tx.Where("os = ? AND arch = ? AND revoked_at IS NULL", r.OS, r.Arch).
		Where("id NOT IN (?)", tx.Model(&models.RolloutMachine{}).Select("machine_id").Where("rollout_id = ?", ro.ID)).
		Order("name").Find(&ms).Error; err != nil || len(ms) == 0 {
		return err
	}
	canaries, err := canaryCount(ro.Canary, len(ms))
	if err != nil {
		return err
	}
	if err := canariesFirst(tx, ms, ro.Version); err != nil {
		return err
	}
	if err := placeMachines(tx, ro, ms, canaries); err != nil {
		return err
	}
	if err := audit(tx, actor, "join-rollout", "host-release/"+ro.Version,
		fmt.Sprintf("%s/%s joined the running rollout: %d machine(s), canary %s", r.OS, r.Arch, len(ms), ro.Canary)); err != nil {
		return err
	}
	return stepRollout(tx, ro)
}

// RollOutRelease is what a host module's finished build starts: the
// rollout of its version, or, when one runs already (the release of
// another platform began it), that one, which the release joined.
func (tx *Tx) RollOutRelease(actor, version string, deadline int64) (*models.RolloutView, error) {
	ro, err := fleetRolloutGoing(tx, version)
	if err != nil {
		return nil, err
	}
	if ro != nil {
		return rolloutView(tx, ro)
	}
	return tx.StartRollout(actor, version, "1", 1, deadline)
}

// fleetRolloutGoing is the fleet's rollout of version that runs or is
// paused (nil: none); a plan's host step is not the fleet's.
func fleetRolloutGoing(tx *Tx, version string) (*models.Rollout, error) {
	var ros []models.Rollout
	if err := tx.Where("version = ? AND plan_id = 0 AND state IN ?", version, []string{models.RolloutRunning, models.RolloutPaused}).
		Order("id DESC").Limit(1).Find(&ros).Error; err != nil || len(ros) == 0 {
		return nil, err
	}
	return &ros[0], nil
}

// Releases lists host releases, newest first.
func (s *Store) Releases(ctx context.Context, limit int, cursor int64) ([]models.Release, error) {
	var rs []models.Release
	q := s.db.WithContext(ctx).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	return rs, mapErr(q.Find(&rs).Error)
}

// HostDefault is the fleet-wide default host version ("" when none).
func hostDefault(tx *gorm.DB) (string, error) {
	var st models.Setting
	err := tx.Where("key = ?", models.SettingHostDefault).First(&st).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return "", nil
	}
	return st.Value, err
}

// HostDefault is the fleet-wide default host version.
func (s *Store) HostDefault(ctx context.Context) (string, error) {
	return hostDefault(s.db.WithContext(ctx))
}

// StartRollout begins a rollout of a host release to every machine whose
// os/arch it was built for: canaries first (machines whose variable canary
// is "true", else the first by name), then the rest, max_in_flight at a time.
func (s *Store) StartRollout(ctx context.Context, actor, version, canary string, maxInFlight, deadline int64) (*models.RolloutView, error) {
	return Write(ctx, s, func(tx *Tx) (*models.RolloutView, error) {
		return tx.StartRollout(actor, version, canary, maxInFlight, deadline)
	})
}

// StartRollout is Store.StartRollout inside tx.
func (tx *Tx) StartRollout(actor, version, canary string, maxInFlight, deadline int64) (*models.RolloutView, error) {
	rels, err := rolloutReleases(tx, version)
	if err != nil {
		return nil, err
	}
	var ms []models.Machine
	if err := tx.Order("name").Find(&ms).Error; err != nil {
		return nil, err
	}
	var eligible []models.Machine
	for _, m := range ms {
		if rels[m.OS+"/"+m.Arch] != nil {
			eligible = append(eligible, m)
		}
	}
	if len(eligible) == 0 {
		return nil, models.Invalid("version", "no machine runs on a platform this release was built for")
	}
	return beginRollout(tx, actor, &models.Rollout{Version: version, Canary: canary, MaxInFlight: maxInFlight, DeadlineSeconds: deadline}, eligible)
}

// rolloutReleases reads a host release's builds by platform ("linux/amd64"):
// not found when there is none, a conflict when one has failed.
func rolloutReleases(tx *Tx, version string) (map[string]*models.Release, error) {
	var rels []models.Release
	if err := tx.Where("version = ?", version).Order("os, arch").Find(&rels).Error; err != nil {
		return nil, err
	}
	if len(rels) == 0 {
		return nil, fmt.Errorf("host release %s: %w", version, models.ErrNotFound)
	}
	out := map[string]*models.Release{}
	for i, r := range rels {
		if r.State == models.ReleaseFailed {
			return nil, fmt.Errorf("%w: host release %s failed (%s); release a new version", models.ErrConflict, version, r.Failure)
		}
		out[r.OS+"/"+r.Arch] = &rels[i]
	}
	return out, nil
}

// beginRollout records ro (a fleet's rollout, or a plan's host step when
// ro.PlanID is set) over eligible, canaries first, and takes its first
// wave. One rollout runs at a time, whoever started it.
func beginRollout(tx *Tx, actor string, ro *models.Rollout, eligible []models.Machine) (*models.RolloutView, error) {
	var n int64
	if err := tx.Model(&models.Rollout{}).Where("state IN ?", []string{models.RolloutRunning, models.RolloutPaused}).Count(&n).Error; err != nil {
		return nil, err
	}
	if n > 0 {
		return nil, fmt.Errorf("%w: another host rollout is running or paused; finish or cancel it first", models.ErrConflict)
	}
	// A revoked machine is sent nothing, so its host would never report
	// the upgrade: waiting on it failed a good release at the deadline.
	had := len(eligible)
	eligible = slices.DeleteFunc(eligible, func(m models.Machine) bool { return m.RevokedAt != nil })
	if had > 0 && len(eligible) == 0 && ro.PlanID == 0 {
		return nil, models.Invalid("version", "every machine it would reach is revoked: nothing is sent to a revoked machine")
	}
	canaries, err := canaryCount(ro.Canary, len(eligible))
	if err != nil {
		return nil, err
	}
	if err := canariesFirst(tx, eligible, ro.Version); err != nil {
		return nil, err
	}
	ro.State, ro.CreatedBy, ro.CreatedAt = models.RolloutRunning, actor, tx.s.Now()
	if err := tx.Create(ro).Error; err != nil {
		return nil, err
	}
	if err := placeMachines(tx, ro, eligible, canaries); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%d machine(s), canary %s, max in flight %d", len(eligible), ro.Canary, ro.MaxInFlight)
	if ro.PlanID > 0 {
		what = fmt.Sprintf("host step of plan %d: %s", ro.PlanID, what)
	}
	if err := audit(tx, actor, "start-rollout", "host-release/"+ro.Version, what); err != nil {
		return nil, err
	}
	if err := stepRollout(tx, ro); err != nil {
		return nil, err
	}
	return rolloutView(tx, ro)
}

// placeMachines gives each of ms a place in ro, pending: the first
// canaries of them in the canary wave, the rest after it. A place keeps
// the release the machine was to run before (its own target, else the
// fleet default where that reached it), which a failed trial puts back.
func placeMachines(tx *Tx, ro *models.Rollout, ms []models.Machine, canaries int) error {
	def, err := hostDefault(tx.DB)
	if err != nil {
		return err
	}
	var tried []models.Release
	if err := tx.Where("version = ? AND state = ? AND rolled_out_at IS NOT NULL", def, models.ReleaseReady).Find(&tried).Error; err != nil {
		return err
	}
	defaultFor := map[string]bool{}
	for _, r := range tried {
		defaultFor[r.OS+"/"+r.Arch] = true
	}
	for i, m := range ms {
		wave := int64(1)
		if i < canaries {
			wave = 0
		}
		prev := m.TargetHostVersion
		if prev == "" && defaultFor[m.OS+"/"+m.Arch] {
			prev = def
		}
		if err := tx.Create(&models.RolloutMachine{RolloutID: ro.ID, MachineID: m.ID, Wave: wave, State: models.UpgradePending, Previous: prev,
			MachineName: m.Name}).Error; err != nil {
			return err
		}
	}
	return nil
}

// canaryCount reads a canary size: a count ("1") or a percent ("10%").
func canaryCount(c string, total int) (int, error) {
	if p, ok := strings.CutSuffix(c, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 100 {
			return 0, models.Invalid("canary", `a count like 1 or a percent like "10%"`)
		}
		return max(1, int(math.Ceil(float64(total*n)/100))), nil
	}
	n, err := strconv.Atoi(c)
	if err != nil || n <= 0 {
		return 0, models.Invalid("canary", `a count like 1 or a percent like "10%"`)
	}
	return min(n, total), nil
}

func rolloutView(tx *Tx, ro *models.Rollout) (*models.RolloutView, error) {
	v := &models.RolloutView{Rollout: *ro, Machines: []models.RolloutMachine{}}
	var rows []struct {
		models.RolloutMachine
		Name string
	}
	err := tx.Table("rollout_machines").Select("rollout_machines.*, "+deletedOrName("rollout_machines")+" AS name").
		Joins("LEFT JOIN machines ON machines.id = rollout_machines.machine_id").
		Where("rollout_id = ?", ro.ID).Order("rollout_machines.wave, name").Scan(&rows).Error
	// A rollout that ended (halted, cancelled) reaches no machine it had
	// not reached: such a machine is said withdrawn, with why, not
	// "pending" as if still to come (as a plan's steps are).
	ended := ro.State == models.RolloutHalted || ro.State == models.RolloutCancelled || ro.State == models.RolloutDone
	for _, r := range rows {
		r.RolloutMachine.Machine = r.Name
		if ended && r.State == models.UpgradePending {
			r.RolloutMachine.State = models.UpgradeWithdrawn
			r.RolloutMachine.Reason = "never reached: the rollout " + ro.State + " first"
		}
		v.Machines = append(v.Machines, r.RolloutMachine)
	}
	return v, err
}

// Rollout reads the latest rollout of a version with its machines.
func (s *Store) Rollout(ctx context.Context, version string) (*models.RolloutView, error) {
	var out *models.RolloutView
	err := s.db.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		// The newest rollout that reached a machine: a plan's host step
		// for a release its machines already run makes an empty one,
		// which hid the rollout that did the work.
		var ro models.Rollout
		if err := db.Where("version = ?", version).Order(newestReaching).Take(&ro).Error; err != nil {
			return fmt.Errorf("rollout of %s: %w", version, mapErr(err))
		}
		var err error
		out, err = rolloutView(&Tx{DB: db, s: s}, &ro)
		return err
	})
	return out, err
}

// newestReaching orders a version's rollouts newest first, those that
// reached a machine before those that did not. A string: gorm's Order
// ignores a clause.Expr, and First orders by id on its own.
const newestReaching = "EXISTS (SELECT 1 FROM rollout_machines rm WHERE rm.rollout_id = rollouts.id) DESC, rollouts.id DESC"

// SetRolloutState pauses, resumes or cancels the latest rollout of a version.
func (s *Store) SetRolloutState(ctx context.Context, actor, version, action string) (*models.RolloutView, error) {
	var out *models.RolloutView
	err := s.write(ctx, func(tx *Tx) error {
		// The rollout the version's view shows (Rollout): the newest that
		// reached a machine. Its row locked on PostgreSQL, as a plan's is
		// by a person's act: another instance's step (FOR UPDATE SKIP
		// LOCKED) found it free, halted or finished it, and this act then
		// wrote its state over that one's — a pause over a halt, a
		// cancel over a done rollout whose release was the fleet default
		// by then — and two resumes on two instances both went through.
		var ro models.Rollout
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("version = ?", version).Order(newestReaching).Take(&ro).Error; err != nil {
			return fmt.Errorf("rollout of %s: %w", version, mapErr(err))
		}
		from := map[string]string{"pause": models.RolloutRunning, "resume": models.RolloutPaused, "cancel": ""}[action]
		to := map[string]string{"pause": models.RolloutPaused, "resume": models.RolloutRunning, "cancel": models.RolloutCancelled}[action]
		active := ro.State == models.RolloutRunning || ro.State == models.RolloutPaused
		if (from != "" && ro.State != from) || (from == "" && !active) {
			next := ""
			if ro.State == models.RolloutHalted {
				// Halted is an end: say the way on.
				next = fmt.Sprintf(": a halted rollout is over (%s); fix what halted it and start a new rollout of it "+
					"(meshctl releases rollout %s, or POST /api/v1/host-releases/%s/rollout), or roll out another release",
					strings.TrimPrefix(ro.Reason, "halted: "), version, version)
			}
			return fmt.Errorf("%w: the rollout of %s is %s; cannot %s it%s", models.ErrConflict, version, ro.State, action, next)
		}
		up := map[string]any{"state": to}
		if to == models.RolloutCancelled {
			up["finished_at"] = s.Now()
			up["reason"] = "cancelled by " + actor
		}
		if err := tx.Model(&ro).Updates(up).Error; err != nil {
			return err
		}
		if err := audit(tx, actor, action+"-rollout", "host-release/"+version, ""); err != nil {
			return err
		}
		if to == models.RolloutRunning {
			if err := stepRollout(tx, &ro); err != nil {
				return err
			}
		}
		var err error
		out, err = rolloutView(tx, &ro)
		return err
	})
	return out, err
}

// StepRollouts advances every running rollout: machines past their deadline
// fail (and halt it), the next wave starts when the one before has
// upgraded, and a rollout whose machines all upgraded completes.
func (s *Store) StepRollouts(ctx context.Context) error {
	var ids []int64
	if err := s.db.WithContext(ctx).Model(&models.Rollout{}).Where("state = ?", models.RolloutRunning).Pluck("id", &ids).Error; err != nil {
		return mapErr(err)
	}
	for _, id := range ids {
		err := s.write(ctx, func(tx *Tx) error {
			var ro models.Rollout
			q := tx.DB
			if s.dialect == Postgres {
				q = q.Clauses(clause.Locking{Strength: "UPDATE", Options: "SKIP LOCKED"})
			}
			if err := q.Where("id = ? AND state = ?", id, models.RolloutRunning).First(&ro).Error; err != nil {
				if errors.Is(err, gorm.ErrRecordNotFound) {
					return nil // another instance holds it, or it moved on
				}
				return err
			}
			return stepRollout(tx, &ro)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func stepRollout(tx *Tx, ro *models.Rollout) error {
	if ro.State != models.RolloutRunning {
		return nil
	}
	now := tx.s.Now()
	var rms []models.RolloutMachine
	if err := tx.Where("rollout_id = ?", ro.ID).Order("wave, machine_id").Find(&rms).Error; err != nil {
		return err
	}
	deadline := time.Duration(ro.DeadlineSeconds) * time.Second
	if err := withdrawUnreachable(tx, rms); err != nil {
		return err
	}
	if halted, err := haltUnsendable(tx, ro, rms); err != nil || halted {
		return err
	}
	if err := replaceWithdrawnCanaries(tx, rms, ro.Version); err != nil {
		return err
	}
	inFlight, canaryLeft, pending, upgraded := 0, 0, 0, 0
	for i := range rms {
		rm := &rms[i]
		if rm.State == models.UpgradeUpgrading && rm.StartedAt != nil && now.Sub(*rm.StartedAt) > deadline {
			if never, err := neverTried(tx, ro, rm, deadline); err != nil || never {
				return err
			}
			reason := fmt.Sprintf("no upgraded report within %s", deadline)
			if err := failMachine(tx, ro, rm, models.UpgradeFailed, reason); err != nil {
				return err
			}
			return nil
		}
		switch rm.State {
		case models.UpgradeUpgraded:
			upgraded++
		case models.UpgradeUpgrading:
			inFlight++
			if rm.Wave == 0 {
				canaryLeft++
			}
		case models.UpgradePending:
			pending++
			if rm.Wave == 0 {
				canaryLeft++
			}
		}
	}
	if pending == 0 && inFlight == 0 && upgraded == 0 && ro.PlanID == 0 && len(rms) > 0 {
		// Every machine it reached was withdrawn (revoked, deleted): no
		// host tried the release, so it does not become the fleet's
		// default untried. Halted, saying so; the release is not failed.
		why := "no machine tried it: every machine it reached was withdrawn (revoked or deleted); the fleet default is unchanged"
		if err := tx.Model(ro).Updates(map[string]any{"state": models.RolloutHalted, "reason": why, "finished_at": now}).Error; err != nil {
			return err
		}
		ro.State, ro.Reason, ro.FinishedAt = models.RolloutHalted, why, &now
		return audit(tx, "controller", "rollout-halted", "host-release/"+ro.Version, why)
	}
	if pending == 0 && inFlight == 0 {
		if err := tx.Model(ro).Updates(map[string]any{"state": models.RolloutDone, "finished_at": now}).Error; err != nil {
			return err
		}
		ro.FinishedAt = &now
		if ro.PlanID > 0 {
			// A plan's host step reached only the plan's machines: the
			// rest of the fleet was never tried on it.
			ro.State = models.RolloutDone
			return audit(tx, "controller", "rollout-done", "host-release/"+ro.Version,
				fmt.Sprintf("host step of plan %d: its machines run %s; the fleet default is unchanged", ro.PlanID, ro.Version))
		}
		if err := tx.Clauses(clause.OnConflict{UpdateAll: true}).Create(&models.Setting{Key: models.SettingHostDefault, Value: ro.Version}).Error; err != nil {
			return err
		}
		// The platforms a machine of it upgraded on are tried: the
		// default reaches their machines. A release for a platform none
		// of its machines ran, or uploaded later, has no such mark until
		// a rollout upgrades a machine on it.
		tried := tx.Table("rollout_machines").Select("1").Joins("JOIN machines ON machines.id = rollout_machines.machine_id").
			Where("rollout_machines.rollout_id = ? AND rollout_machines.state = ? AND machines.os = host_releases.os AND machines.arch = host_releases.arch",
				ro.ID, models.UpgradeUpgraded)
		if err := tx.Model(&models.Release{}).Where("version = ? AND state = ? AND rolled_out_at IS NULL AND EXISTS (?)", ro.Version, models.ReleaseReady, tried).
			Update("rolled_out_at", now).Error; err != nil {
			return err
		}
		ro.State = models.RolloutDone
		return audit(tx, "controller", "rollout-done", "host-release/"+ro.Version, "the fleet default is now "+ro.Version)
	}
	again := false
	for i := range rms {
		rm := &rms[i]
		if rm.State != models.UpgradePending {
			continue
		}
		if rm.Wave == 0 {
			// Every canary at once.
		} else if canaryLeft > 0 || int64(inFlight) >= max(1, ro.MaxInFlight) {
			break
		}
		if err := startUpgrade(tx, ro, rm); err != nil {
			return err
		}
		if rm.State == models.UpgradeUpgraded {
			// It ran the release already: the next wave may go now.
			again = true
			continue
		}
		inFlight++
	}
	if again {
		return stepRollout(tx, ro)
	}
	return nil
}

// startUpgrade makes the release a machine's target: a new generation whose
// declaration names it. A machine whose host already runs the release
// (upgraded by a plan's host step, or an earlier rollout, cancelled since)
// is upgraded at once: its host has nothing to do and would never report
// an upgrade, and waiting for one failed a good release at the deadline.
func startUpgrade(tx *Tx, ro *models.Rollout, rm *models.RolloutMachine) error {
	now := tx.s.Now()
	var running string
	if err := tx.Model(&models.Machine{}).Where("id = ?", rm.MachineID).Pluck("host_version", &running).Error; err != nil {
		return err
	}
	if err := tx.Model(&models.Machine{}).Where("id = ?", rm.MachineID).Update("target_host_version", ro.Version).Error; err != nil {
		return err
	}
	if err := bumpGenerations(tx, []int64{rm.MachineID}, models.TriggerRollout); err != nil {
		return err
	}
	up := map[string]any{"state": models.UpgradeUpgrading, "started_at": now}
	rm.State, rm.StartedAt = models.UpgradeUpgrading, &now
	if running == ro.Version {
		rm.State, rm.FinishedAt, rm.Reason = models.UpgradeUpgraded, &now, "its host ran "+ro.Version+" already"
		up["state"], up["finished_at"], up["reason"] = rm.State, now, rm.Reason
	}
	return tx.Model(&models.RolloutMachine{}).Where("rollout_id = ? AND machine_id = ?", rm.RolloutID, rm.MachineID).
		Updates(up).Error
}

// failMachine ends a machine's upgrade in failure: the rollout halts with
// the cause, the release is marked failed (unless its host refused it:
// then nothing is known of the release), and the machine's target goes
// back (a new generation), so no declaration names the release again.
func failMachine(tx *Tx, ro *models.Rollout, rm *models.RolloutMachine, state, reason string) error {
	// A host's refusal says nothing of the release: it is not failed.
	return haltOnMachine(tx, ro, rm, state, reason, state != models.UpgradeRefused)
}

// haltOnMachine ends a machine's upgrade in state, halts its rollout with
// the reason, and fails the release when blameRelease.
func haltOnMachine(tx *Tx, ro *models.Rollout, rm *models.RolloutMachine, state, reason string, blameRelease bool) error {
	now := tx.s.Now()
	var m models.Machine
	if err := tx.Where("id = ?", rm.MachineID).First(&m).Error; err != nil {
		return err
	}
	if err := endUpgrade(tx, rm, state, reason, now); err != nil {
		return err
	}
	why := fmt.Sprintf("machine %s %s: %s", m.Name, strings.ReplaceAll(state, "_", " "), reason)
	if err := tx.Model(ro).Updates(map[string]any{"state": models.RolloutHalted, "reason": why, "finished_at": now}).Error; err != nil {
		return err
	}
	ro.State = models.RolloutHalted
	if blameRelease {
		if err := failRelease(tx, ro.Version, &m, why); err != nil {
			return err
		}
	}
	if err := putTargetBack(tx, m.ID, ro.Version, rm.Previous); err != nil {
		return err
	}
	// The other machines still upgrading to it (canaries go together) are
	// stopped: their target goes back too, else it would name a release
	// no declaration carries any more (only ready ones are composed) and
	// they would show upgrading for good.
	var others []models.RolloutMachine
	if err := tx.Where("rollout_id = ? AND machine_id <> ? AND state = ?", ro.ID, m.ID, models.UpgradeUpgrading).Find(&others).Error; err != nil {
		return err
	}
	for i := range others {
		if err := endUpgrade(tx, &others[i], models.UpgradeStopped, "the rollout halted: "+why, now); err != nil {
			return err
		}
		if err := putTargetBack(tx, others[i].MachineID, ro.Version, others[i].Previous); err != nil {
			return err
		}
	}
	return audit(tx, "controller", "rollout-halted", "host-release/"+ro.Version, why)
}

// neverTried withdraws a machine whose upgrade ran out its deadline with
// no sign of its host since the upgrade started (no poll, nor a poll held:
// last_seen is flushed each heartbeat, a held poll's as the flush's time).
// Its host never had the declaration naming the release, so the deadline
// says nothing of the release: failing it failed a good release for good
// over one machine that stopped polling before it was picked (a canary
// heard from minutes before). The machine's target goes back, and a
// canary is replaced at the next step, as for a machine revoked.
func neverTried(tx *Tx, ro *models.Rollout, rm *models.RolloutMachine, deadline time.Duration) (bool, error) {
	if ro.PlanID != 0 {
		// A plan's host step with no machine that took the release is
		// not done: it fails as before, and the plan halts.
		return false, nil
	}
	var m models.Machine
	if err := tx.Select("id", "name", "last_seen", "conflict").Where("id = ?", rm.MachineID).First(&m).Error; err != nil {
		return false, err
	}
	var reason string
	if m.Conflict {
		reason = fmt.Sprintf("no upgraded report within %s: the machine is in conflict, and nothing is sent to it until an admin resolves it, so the release was never tried there", deadline)
	} else {
		if m.LastSeen != nil && !m.LastSeen.Before(*rm.StartedAt) {
			return false, nil
		}
		// A declaration sent since (the minute before: the instances'
		// clocks and the flush of last_seen may lag) reached the host:
		// the release was tried, and the deadline is its failure.
		var sent int64
		if err := tx.Model(&models.Send{}).Where("machine_id = ? AND created_at >= ?", m.ID, rm.StartedAt.Add(-time.Minute)).
			Limit(1).Count(&sent).Error; err != nil || sent > 0 {
			return false, err
		}
		seen := "never heard from"
		if m.LastSeen != nil {
			seen = "last heard from " + m.LastSeen.UTC().Format(time.RFC3339)
		}
		reason = fmt.Sprintf("no upgraded report within %s, and no poll from its host since its upgrade started (%s): the release was never tried there", deadline, seen)
	}
	if err := endUpgrade(tx, rm, models.UpgradeWithdrawn, reason, tx.s.Now()); err != nil {
		return false, err
	}
	if err := putTargetBack(tx, m.ID, ro.Version, rm.Previous); err != nil {
		return false, err
	}
	return true, audit(tx, "controller", "rollout-withdrew", "host-release/"+ro.Version, fmt.Sprintf("machine %s: %s", m.Name, reason))
}

// endUpgrade records how a machine's upgrade in a rollout ended.
func endUpgrade(tx *Tx, rm *models.RolloutMachine, state, reason string, now time.Time) error {
	return tx.Model(&models.RolloutMachine{}).Where("rollout_id = ? AND machine_id = ?", rm.RolloutID, rm.MachineID).
		Updates(map[string]any{"state": state, "reason": reason, "finished_at": now}).Error
}

// failRelease marks a release failed for m's platform, with why, and
// puts back the target of every machine of that platform that upgraded to
// it (a rollout done, or canaries that upgraded before another failed): a
// failed release is named by no declaration (only ready ones are
// composed), and those machines read "current" on it while their hosts
// ran a release known to fail, restarted or rebooted into it at any time.
// Each goes back to the release it left, as its own host's trial.
func failRelease(tx *Tx, version string, m *models.Machine, why string) error {
	// The first failure is the release's word: a later one (another
	// machine's rollback of it, reported late) is on the rollout's record
	// and in the audit, not written over it.
	if err := tx.Model(&models.Release{}).Where("version = ? AND os = ? AND arch = ? AND state <> ?", version, m.OS, m.Arch, models.ReleaseFailed).
		Updates(map[string]any{"state": models.ReleaseFailed, "failure": why, "failed_at": tx.s.Now()}).Error; err != nil {
		return err
	}
	var rows []struct {
		MachineID int64
		Name      string
		Previous  string
	}
	if err := tx.Table("rollout_machines").Select("rollout_machines.machine_id, machines.name, rollout_machines.previous").
		Joins("JOIN rollouts ON rollouts.id = rollout_machines.rollout_id").
		Joins("JOIN machines ON machines.id = rollout_machines.machine_id").
		Where("rollouts.version = ? AND rollout_machines.state = ? AND machines.os = ? AND machines.arch = ? AND machines.target_host_version = ?",
			version, models.UpgradeUpgraded, m.OS, m.Arch, version).
		Order("rollout_machines.rollout_id DESC, machines.name").Scan(&rows).Error; err != nil {
		return err
	}
	var back []string
	done := map[int64]bool{}
	for _, r := range rows {
		if done[r.MachineID] || r.Previous == version {
			// A rollout of the version again found the machine on it
			// already: the release it left is an older row's.
			continue
		}
		done[r.MachineID] = true
		if err := putTargetBack(tx, r.MachineID, version, r.Previous); err != nil {
			return err
		}
		back = append(back, r.Name+" to "+cmp.Or(r.Previous, "the fleet default"))
	}
	if len(back) == 0 {
		return nil
	}
	return audit(tx, "controller", "targets-back", "host-release/"+version,
		fmt.Sprintf("release %s failed (%s/%s): the machines that upgraded to it go back: %s", version, m.OS, m.Arch, strings.Join(back, ", ")))
}

// withdrawUnreachable takes the machines revoked or deleted since the
// rollout began out of it (in rms too), before or during their upgrade:
// nothing is sent to a revoked machine, and a deleted one has no host
// here any more, so neither would report, and the deadline would fail the
// release for a machine that was never sent it.
func withdrawUnreachable(tx *Tx, rms []models.RolloutMachine) error {
	if len(rms) == 0 {
		return nil
	}
	// Found by subqueries, not a list of ids: a fleet's rollout holds more
	// machines than a statement takes parameters.
	open := func() *gorm.DB {
		return tx.Model(&models.RolloutMachine{}).Select("machine_id").
			Where("rollout_id = ? AND state IN ?", rms[0].RolloutID, []string{models.UpgradePending, models.UpgradeUpgrading})
	}
	var revoked []models.Machine
	if err := tx.Select("id", "revoked_reason").Where("revoked_at IS NOT NULL AND id IN (?)", open()).Find(&revoked).Error; err != nil {
		return err
	}
	var gone []int64
	if err := open().Where("machine_id NOT IN (?)", tx.Model(&models.Machine{}).Select("id")).Pluck("machine_id", &gone).Error; err != nil {
		return err
	}
	why := map[int64]string{}
	for _, id := range gone {
		why[id] = withdrawnDeleted
	}
	for _, m := range revoked {
		why[m.ID] = fmt.Sprintf("revoked (%s): nothing is sent to it, so the rollout does not reach it", cmp.Or(m.RevokedReason, "no reason given"))
	}
	if len(why) == 0 {
		return nil
	}
	now := tx.s.Now()
	for i := range rms {
		reason, out := why[rms[i].MachineID]
		if !out {
			continue
		}
		if err := endUpgrade(tx, &rms[i], models.UpgradeWithdrawn, reason, now); err != nil {
			return err
		}
		rms[i].State, rms[i].Reason, rms[i].FinishedAt = models.UpgradeWithdrawn, reason, &now
	}
	return nil
}

// canariesFirst orders ms (by name) as a rollout of version takes its
// canaries: machines whose host does not run version already (one that
// does is upgraded at once and tries nothing), then those an admin
// flagged (variable canary=true), then machines whose host was heard from
// lately. A canary that is offline only waits out the rollout's deadline,
// and is then withdrawn and replaced (neverTried).
func canariesFirst(tx *Tx, ms []models.Machine, version string) error {
	var flagged []int64
	if err := tx.Model(&models.MachineVariable{}).Where("key = ? AND value = ?", "canary", "true").Pluck("machine_id", &flagged).Error; err != nil {
		return err
	}
	isCanary := map[int64]bool{}
	for _, id := range flagged {
		isCanary[id] = true
	}
	now := tx.s.Now()
	live := func(m *models.Machine) bool {
		return m.LastSeen != nil && now.Sub(*m.LastSeen) <= tx.s.Rules.OfflineAfter
	}
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := &ms[i], &ms[j]
		if ranA, ranB := a.HostVersion == version, b.HostVersion == version; ranA != ranB {
			return ranB
		}
		if a.Conflict != b.Conflict {
			// Sent nothing until an admin resolves it: no canary.
			return b.Conflict
		}
		if isCanary[a.ID] != isCanary[b.ID] {
			return isCanary[a.ID]
		}
		return live(a) && !live(b)
	})
	return nil
}

// replaceWithdrawnCanaries gives the canary wave, when every canary of it
// was withdrawn before one tried the release, the next machine still to
// come (in rms too): the waves after it wait for a canary that upgraded,
// and a withdrawn one let them all go untried.
func replaceWithdrawnCanaries(tx *Tx, rms []models.RolloutMachine, version string) error {
	if !slices.ContainsFunc(rms, func(rm models.RolloutMachine) bool { return rm.Wave == 0 && rm.State == models.UpgradeWithdrawn }) {
		return nil
	}
	// promote makes the next machine still to come (of platform p, or of
	// any when p is "") a canary, as the first were taken: flagged, then
	// heard from (by a subquery: the waiting are as many as the fleet).
	promote := func(p string) (string, error) {
		q := tx.Select("id", "name", "last_seen", "host_version", "os", "arch", "conflict").Where("id IN (?)", tx.Model(&models.RolloutMachine{}).Select("machine_id").
			Where("rollout_id = ? AND wave > 0 AND state = ?", rms[0].RolloutID, models.UpgradePending))
		if os, arch, ok := strings.Cut(p, "/"); ok {
			q = q.Where("os = ? AND arch = ?", os, arch)
		}
		var ms []models.Machine
		if err := q.Order("name").Find(&ms).Error; err != nil || len(ms) == 0 {
			return "", err
		}
		if err := canariesFirst(tx, ms, version); err != nil {
			return "", err
		}
		next := slices.IndexFunc(rms, func(rm models.RolloutMachine) bool { return rm.MachineID == ms[0].ID })
		rms[next].Wave = 0
		return ms[0].OS + "/" + ms[0].Arch, tx.Model(&models.RolloutMachine{}).Where("rollout_id = ? AND machine_id = ?", rms[next].RolloutID, rms[next].MachineID).
			Update("wave", 0).Error
	}
	// The rollout's canaries all withdrawn (revoked, deleted) before one
	// tried the release: the waves after them wait for a canary that
	// upgraded, so the next machine to come takes the place.
	live, waiting := 0, 0
	for _, rm := range rms {
		switch {
		case rm.Wave == 0 && rm.State != models.UpgradeWithdrawn:
			live++
		case rm.Wave > 0 && rm.State == models.UpgradePending:
			waiting++
		}
	}
	promoted := ""
	if live == 0 && waiting > 0 {
		var err error
		if promoted, err = promote(""); err != nil {
			return err
		}
	}
	// And by platform: a platform that joined the rollout has canaries of
	// its own (its binary is not the one the others tried), and another
	// platform's canary that upgraded says nothing of it. A deleted
	// machine's platform is unknown: it counts for none.
	var plats []models.Machine
	if err := tx.Select("id", "os", "arch").Where("id IN (?)", tx.Model(&models.RolloutMachine{}).Select("machine_id").
		Where("rollout_id = ?", rms[0].RolloutID)).Find(&plats).Error; err != nil {
		return err
	}
	platform := map[int64]string{}
	for _, m := range plats {
		platform[m.ID] = m.OS + "/" + m.Arch
	}
	type count struct{ had, live, waiting int }
	by := map[string]*count{}
	for _, rm := range rms {
		p := platform[rm.MachineID]
		if by[p] == nil {
			by[p] = &count{}
		}
		switch c := by[p]; {
		case rm.Wave == 0:
			c.had++
			if rm.State != models.UpgradeWithdrawn {
				c.live++
			}
		case rm.State == models.UpgradePending:
			c.waiting++
		}
	}
	for p, c := range by {
		if p == "" || p == promoted || c.had == 0 || c.live > 0 || c.waiting == 0 {
			continue
		}
		if _, err := promote(p); err != nil {
			return err
		}
	}
	// rms stays in wave order, as read: a canary is started first.
	slices.SortStableFunc(rms, func(a, b models.RolloutMachine) int { return cmp.Compare(a.Wave, b.Wave) })
	return nil
}

// haltUnsendable halts a rollout on a machine it is upgrading whose
// generation cannot be composed: the release travels in its declaration,
// so nothing would reach it, and waiting for the deadline would halt it
// "no upgraded report" and fail a release that was never sent. The
// release is not failed: nothing was learnt of it.
func haltUnsendable(tx *Tx, ro *models.Rollout, rms []models.RolloutMachine) (bool, error) {
	var ids []int64
	at := map[int64]*models.RolloutMachine{}
	for i := range rms {
		if rms[i].State == models.UpgradeUpgrading {
			ids = append(ids, rms[i].MachineID)
			at[rms[i].MachineID] = &rms[i]
		}
	}
	if len(ids) == 0 {
		return false, nil
	}
	var ms []models.Machine
	if err := tx.Select("id", "name", "generation", "compose_error", "compose_error_generation").
		Where("id IN ? AND compose_error <> '' AND compose_error_generation = generation", ids).Order("id").Find(&ms).Error; err != nil {
		return false, err
	}
	for i := range ms {
		m := &ms[i]
		if err := composeErrorSince(tx, m, m.Generation); err != nil {
			return false, err
		}
		if m.ComposeError == "" {
			continue
		}
		reason := fmt.Sprintf("generation %d cannot be composed, so the release cannot be sent to it: %s", m.Generation, m.ComposeError)
		return true, haltOnMachine(tx, ro, at[m.ID], models.UpgradeFailed, reason, false)
	}
	return false, nil
}

// putTargetBack sets a machine's target back to previous, with a new
// generation, only if it still names version: a late report of a rollout
// done may come while the machine upgrades in the next one, whose target
// stays.
func putTargetBack(tx *Tx, machineID int64, version, previous string) error {
	if previous != "" {
		// A release that failed since the machine left it is named by no
		// declaration: the machine follows the fleet default instead.
		var failed int64
		if err := tx.Model(&models.Release{}).Where("version = ? AND state = ? AND os = (?) AND arch = (?)", previous, models.ReleaseFailed,
			tx.Model(&models.Machine{}).Select("os").Where("id = ?", machineID),
			tx.Model(&models.Machine{}).Select("arch").Where("id = ?", machineID)).Count(&failed).Error; err != nil {
			return err
		}
		if failed > 0 {
			previous = ""
		}
	}
	res := tx.Model(&models.Machine{}).Where("id = ? AND target_host_version = ?", machineID, version).Update("target_host_version", previous)
	if res.Error != nil || res.RowsAffected == 0 {
		return res.Error
	}
	return bumpGenerations(tx, []int64{machineID}, models.TriggerRollout)
}

// upgradeReported applies an upgraded or rolled_back report, or the
// host's refusal of the release, to the machine's running rollout.
func upgradeReported(tx *Tx, m *models.Machine, r *models.Report) error {
	var rm models.RolloutMachine
	// A paused rollout's machines still upgrade (pausing stops the next
	// wave, not a trial under way): their reports count as a running one's.
	// A cancelled rollout's machines on trial when it was cancelled finish
	// their trials too (cancelling withdraws the machines not reached):
	// how each ended is recorded, else the row said upgrading for good and
	// a release whose trial failed stayed ready for the next rollout.
	err := tx.Joins("JOIN rollouts ON rollouts.id = rollout_machines.rollout_id").
		Where("rollout_machines.machine_id = ? AND rollouts.state IN ? AND rollout_machines.state = ?", m.ID,
			[]string{models.RolloutRunning, models.RolloutPaused, models.RolloutCancelled}, models.UpgradeUpgrading).
		Order("rollout_machines.rollout_id DESC").First(&rm).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return rolledBackAfterUpgraded(tx, m, r)
	}
	if err != nil {
		return err
	}
	var ro models.Rollout
	if err := tx.Where("id = ?", rm.RolloutID).First(&ro).Error; err != nil {
		return err
	}
	if ro.State == models.RolloutCancelled {
		return trialEndedAfterCancel(tx, &ro, &rm, m, r)
	}
	switch r.Outcome {
	case models.OutcomeUpgraded:
		if r.HostVersion != ro.Version {
			return nil
		}
		// Judged before (judgeUpgraded): a trial failed on its schemas
		// never gets here.
		now := tx.s.Now()
		if err := tx.Model(&models.RolloutMachine{}).Where("rollout_id = ? AND machine_id = ?", rm.RolloutID, rm.MachineID).
			Updates(map[string]any{"state": models.UpgradeUpgraded, "finished_at": now}).Error; err != nil {
			return err
		}
		return stepRollout(tx, &ro)
	case models.OutcomeRolledBack:
		if from, ok := models.RolledBackFrom(r.Reason); ok && from != ro.Version {
			// A rollback of another release, reported late (it waited in
			// the host's outbox): it says nothing of this rollout's, which
			// it would have failed untried — but it may of the release it
			// names, whose upgraded report was accepted before.
			return rolledBackAfterUpgraded(tx, m, r)
		}
		return failMachine(tx, &ro, &rm, models.UpgradeRolledBack, r.Reason) // clipped and escaped (DecodeReport)
	case models.OutcomeRefused:
		// The host will not take the release (it does not run under the
		// launcher, say): halted now, with its words, rather than at the
		// deadline with none. The release is not marked failed: nothing
		// was learnt of it.
		if models.RefusedTarget(ro.Version, r.Outcome, r.Reason) {
			return failMachine(tx, &ro, &rm, models.UpgradeRefused, r.Reason)
		}
	}
	return nil
}

// trialEndedAfterCancel records how a trial under way when its rollout
// was cancelled ended: upgraded, or rolled back (the release failed, the
// machine's target back to the release it left, as a running rollout's
// failure does, the rollout's own word left as it is), or refused by the
// host (its target back, the release not failed: nothing was learnt of
// it).
func trialEndedAfterCancel(tx *Tx, ro *models.Rollout, rm *models.RolloutMachine, m *models.Machine, r *models.Report) error {
	now := tx.s.Now()
	switch r.Outcome {
	case models.OutcomeUpgraded:
		if r.HostVersion != ro.Version {
			return nil
		}
		return endUpgrade(tx, rm, models.UpgradeUpgraded, "", now)
	case models.OutcomeRolledBack:
		if from, ok := models.RolledBackFrom(r.Reason); ok && from != ro.Version {
			return rolledBackAfterUpgraded(tx, m, r)
		}
		why := fmt.Sprintf("machine %s rolled back on its trial, after the rollout was cancelled: %s", m.Name, r.Reason)
		if err := endUpgrade(tx, rm, models.UpgradeRolledBack, r.Reason, now); err != nil {
			return err
		}
		if err := failRelease(tx, ro.Version, m, why); err != nil {
			return err
		}
		if err := putTargetBack(tx, m.ID, ro.Version, rm.Previous); err != nil {
			return err
		}
		return audit(tx, "controller", "release-failed", "host-release/"+ro.Version, why)
	case models.OutcomeRefused:
		if !models.RefusedTarget(ro.Version, r.Outcome, r.Reason) {
			return nil
		}
		if err := endUpgrade(tx, rm, models.UpgradeRefused, r.Reason, now); err != nil {
			return err
		}
		return putTargetBack(tx, m.ID, ro.Version, rm.Previous)
	}
	return nil
}

// rolledBackAfterUpgraded fails a release whose trial host rolled back
// after its upgraded report was accepted: the trial was killed between
// that report's commit and its marker, or its launcher's deadline came
// first. The machine runs the release it left, whatever the rollout
// counted, so its row, the rollout (halted, even if it was done) and the
// release (failed) say so, its target goes back, and a fleet default the
// rollout set goes back to the one before.
func rolledBackAfterUpgraded(tx *Tx, m *models.Machine, r *models.Report) error {
	from, ok := models.RolledBackFrom(r.Reason)
	if r.Outcome != models.OutcomeRolledBack || !ok {
		return nil
	}
	var rms []models.RolloutMachine
	if err := tx.Select("rollout_machines.*").Joins("JOIN rollouts ON rollouts.id = rollout_machines.rollout_id").
		Where("rollout_machines.machine_id = ? AND rollouts.version = ? AND rollout_machines.state = ?", m.ID, from, models.UpgradeUpgraded).
		Order("rollout_machines.rollout_id DESC").Limit(1).Find(&rms).Error; err != nil {
		return err
	}
	if len(rms) == 0 {
		return nil
	}
	// A machine upgraded by a later rollout since has left this release
	// behind: a host sent back to it (the later release failed, and its
	// target went back) whose trial of it fails says nothing of the
	// rollout that once upgraded it, nor of the release the fleet ran.
	var later int64
	if err := tx.Model(&models.RolloutMachine{}).Where("machine_id = ? AND rollout_id > ? AND state = ?", m.ID, rms[0].RolloutID, models.UpgradeUpgraded).
		Count(&later).Error; err != nil || later > 0 {
		return err
	}
	var ro models.Rollout
	if err := tx.Where("id = ?", rms[0].RolloutID).First(&ro).Error; err != nil {
		return err
	}
	if ro.State == models.RolloutHalted || ro.State == models.RolloutCancelled {
		// The rollout has ended otherwise already: its machine and the
		// release are put right, the rollout's own word left as it is.
		return rolledBackAfterEnd(tx, &ro, &rms[0], m, r.Reason)
	}
	wasDone := ro.State == models.RolloutDone
	if err := failMachine(tx, &ro, &rms[0], models.UpgradeRolledBack, r.Reason); err != nil {
		return err
	}
	if !wasDone || ro.PlanID > 0 {
		return nil
	}
	def, err := hostDefault(tx.DB)
	if err != nil || def != ro.Version {
		return err
	}
	// The default before this rollout: the version of the fleet rollout
	// done before it, none if there was none.
	var before []string
	if err := tx.Model(&models.Rollout{}).Where("state = ? AND plan_id = 0 AND id < ? AND version <> ?", models.RolloutDone, ro.ID, ro.Version).
		Order("id DESC").Limit(1).Pluck("version", &before).Error; err != nil {
		return err
	}
	why := "no fleet default"
	if len(before) == 1 {
		why = "the fleet default is " + before[0] + " again"
		err = tx.Clauses(clause.OnConflict{UpdateAll: true}).Create(&models.Setting{Key: models.SettingHostDefault, Value: before[0]}).Error
	} else {
		err = tx.Where("key = ?", models.SettingHostDefault).Delete(&models.Setting{}).Error
	}
	if err != nil {
		return err
	}
	return audit(tx, "controller", "host-default", "host-release/"+ro.Version, why+": "+ro.Version+" failed after its rollout was done")
}

// rolledBackAfterEnd records a machine that rolled back a release after
// its upgraded report, in a rollout halted or cancelled since: its row
// says so, the release is failed, and its target goes back (where it still
// names the release), so it does not show upgrading for good.
func rolledBackAfterEnd(tx *Tx, ro *models.Rollout, rm *models.RolloutMachine, m *models.Machine, reason string) error {
	why := fmt.Sprintf("machine %s rolled back after its upgraded report: %s", m.Name, reason)
	if err := endUpgrade(tx, rm, models.UpgradeRolledBack, reason, tx.s.Now()); err != nil {
		return err
	}
	if err := failRelease(tx, ro.Version, m, why); err != nil {
		return err
	}
	if err := putTargetBack(tx, m.ID, ro.Version, rm.Previous); err != nil {
		return err
	}
	return audit(tx, "controller", "release-failed", "host-release/"+ro.Version, why)
}

// judgeUpgraded judges an upgraded report before anything of it is
// stored. The trial polled before it reported (a poll of the release whose
// schemas differ fails it there); its schemas are judged again here in
// case that poll's instance had nothing new to record. Then the report is
// refused (models.JudgeUpgraded) when the machine's newest rollout row for
// the version is a failure: the controller put its target back, so the
// launcher must not call the release known-good. The returned refusal is
// not an error of the transaction: a failure judged here is committed.
func judgeUpgraded(tx *Tx, m *models.Machine, r *models.Report) (error, error) {
	if _, err := judgeTrialSchemas(tx, m, r.HostVersion, m.Schema); err != nil {
		return nil, err
	}
	var rms []models.RolloutMachine
	if err := tx.Select("rollout_machines.*").Joins("JOIN rollouts ON rollouts.id = rollout_machines.rollout_id").
		Where("rollout_machines.machine_id = ? AND rollouts.version = ?", m.ID, r.HostVersion).
		Order("rollout_machines.rollout_id DESC").Limit(1).Find(&rms).Error; err != nil {
		return nil, err
	}
	var last *models.RolloutMachine
	if len(rms) == 1 {
		last = &rms[0]
	}
	return models.JudgeUpgraded(m.Name, r.HostVersion, last), nil
}

// releasesFor loads the ready releases the machines may be targeted at.
func releasesFor(tx *Tx, ms []models.Machine) (map[string]*models.Release, string, error) {
	def, err := hostDefault(tx.DB)
	if err != nil {
		return nil, "", err
	}
	versions := map[string]bool{}
	if def != "" {
		versions[def] = true
	}
	for _, m := range ms {
		if m.TargetHostVersion != "" {
			versions[m.TargetHostVersion] = true
		}
	}
	out := map[string]*models.Release{}
	if len(versions) == 0 {
		return out, def, nil
	}
	vs := make([]string, 0, len(versions))
	for v := range versions {
		vs = append(vs, v)
	}
	var rs []models.Release
	if err := tx.Where("version IN ? AND state = ?", vs, models.ReleaseReady).Find(&rs).Error; err != nil {
		return nil, "", err
	}
	for i := range rs {
		out[rs[i].Version+" "+rs[i].OS+"/"+rs[i].Arch] = &rs[i]
	}
	return out, def, nil
}

// LastUpgrade is machine id's place in the newest rollout that reached it,
// with the rollout's version (nil: none did). A host's rollback is over in
// moments (its next generation is applied at once, and the machine reads
// current again): the machine's page says it from here.
func (s *Store) LastUpgrade(ctx context.Context, machineID int64) (*models.RolloutMachine, string, error) {
	var rows []struct {
		models.RolloutMachine
		Version string
	}
	err := s.db.WithContext(ctx).Table("rollout_machines").Select("rollout_machines.*, rollouts.version AS version").
		Joins("JOIN rollouts ON rollouts.id = rollout_machines.rollout_id").
		Where("rollout_machines.machine_id = ? AND rollout_machines.state <> ?", machineID, models.UpgradePending).
		Order("rollout_machines.rollout_id DESC").Limit(1).Scan(&rows).Error
	if err != nil || len(rows) == 0 {
		return nil, "", err
	}
	return &rows[0].RolloutMachine, rows[0].Version, nil
}
