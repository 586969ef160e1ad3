package store

import (
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// HostStepDeadline is how long a machine in a plan's host step has to
// report upgraded, as for a release's own rollout.
const HostStepDeadline = 10 * time.Minute

// hostStepReleases reads the builds of the host release a plan rolls out
// first, refusing one that is unknown, failed, or cannot carry build b.
func hostStepReleases(tx *Tx, mod *models.Module, b *models.Build, version string) (map[string]*models.Release, error) {
	rels, err := rolloutReleases(tx, version)
	if errors.Is(err, models.ErrNotFound) {
		return nil, models.Invalid("host_release_first", "no host release "+version)
	}
	if err != nil {
		return nil, err
	}
	man, err := models.ParseManifest([]byte(b.Manifest))
	if err != nil {
		return nil, fmt.Errorf("build %d of %s: %w", b.Number, mod.Name, err)
	}
	list := make([]models.Release, 0, len(rels))
	for _, r := range rels {
		list = append(list, *r)
	}
	if err := models.CheckHostReleaseFirst(version, list, mod.Name, b.Number, man.NeededSchema()); err != nil {
		return nil, err
	}
	return rels, nil
}

// startHostStep starts a plan's host step: a rollout of its host release
// (rels, by platform) to the plan's machines on those platforms whose
// hosts lack a schema it decodes (models.NeedsHostStep), by the rollout
// every release uses — a trial on a canary first, halting on a failed
// one. With no machine to upgrade, the rollout is done at once.
func startHostStep(tx *Tx, actor string, p *models.Plan, rels map[string]*models.Release) error {
	var ms []models.Machine
	if err := tx.Where("id IN (?)", tx.Model(&models.PlanStep{}).Select("machine_id").Where("plan_id = ?", p.ID)).
		Order("name").Find(&ms).Error; err != nil {
		return err
	}
	var eligible []models.Machine
	for _, m := range ms {
		if r := rels[m.OS+"/"+m.Arch]; r != nil && models.NeedsHostStep(models.SchemasOf(m.Schema), models.SchemasOf(r.Schemas)) {
			eligible = append(eligible, m)
		}
	}
	_, err := beginRollout(tx, actor, &models.Rollout{Version: p.HostRelease, Canary: "1", MaxInFlight: 1,
		DeadlineSeconds: int64(HostStepDeadline / time.Second), PlanID: p.ID}, eligible)
	return err
}

// hostStep reads the rollout that carries out a plan's host step (nil
// when none is recorded).
func hostStep(tx *Tx, planID int64) (*models.Rollout, error) {
	var ro models.Rollout
	err := tx.Where("plan_id = ?", planID).Order("id DESC").First(&ro).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &ro, nil
}

// cancelHostStep cancels the host step of a plan being cancelled, when its
// rollout is still running or paused: a cancelled plan moves nothing more.
func cancelHostStep(tx *Tx, actor string, p *models.Plan) error {
	if p.HostRelease == "" {
		return nil
	}
	ro, err := hostStep(tx, p.ID)
	if err != nil || ro == nil {
		return err
	}
	// Read again under its row's lock on PostgreSQL: another instance's
	// step (FOR UPDATE SKIP LOCKED) found it free, halted it and failed
	// its release, and the cancel then wrote "cancelled" over the halt.
	if tx.s.dialect == Postgres {
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", ro.ID).First(ro).Error; err != nil {
			return err
		}
	}
	if ro.State != models.RolloutRunning && ro.State != models.RolloutPaused {
		return nil
	}
	why := fmt.Sprintf("cancelled with plan %d by %s", p.ID, actor)
	if err := tx.Model(ro).Updates(map[string]any{"state": models.RolloutCancelled, "reason": why, "finished_at": tx.s.Now()}).Error; err != nil {
		return err
	}
	return audit(tx, actor, "cancel-rollout", "host-release/"+ro.Version, why)
}
