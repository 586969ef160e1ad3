package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// CreateSource registers a forge repository.
func (s *Store) CreateSource(ctx context.Context, actor string, src *models.Source) error {
	return s.write(ctx, func(tx *Tx) error {
		src.CreatedAt = s.Now()
		if err := tx.Create(src).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				return fmt.Errorf("%w: source %s already exists", models.ErrConflict, src.Name)
			}
			return err
		}
		detail := src.Kind + " " + src.Repository
		if len(src.AllowedFrom) > 0 {
			detail += ", webhooks taken from " + strings.Join(src.AllowedFrom, ", ")
		}
		return audit(tx, actor, "create-source", "source/"+src.Name, detail)
	})
}

// SetSourceAllowedFrom sets the addresses a source's webhooks may come
// from (none: any), audited.
func (s *Store) SetSourceAllowedFrom(ctx context.Context, actor, name string, from models.AllowedFrom) (*models.Source, error) {
	return Write(ctx, s, func(tx *Tx) (*models.Source, error) {
		var src models.Source
		if err := tx.Where("name = ?", name).First(&src).Error; err != nil {
			return nil, fmt.Errorf("source %s: %w", name, mapErr(err))
		}
		if err := tx.Model(&src).Update("allowed_from", from).Error; err != nil {
			return nil, err
		}
		src.AllowedFrom = from
		words := "any address"
		if len(from) > 0 {
			words = strings.Join(from, ", ")
		}
		return &src, audit(tx, actor, "source-allowed-from", "source/"+name, "webhooks taken from "+words)
	})
}

// Sources lists forge sources.
func (s *Store) Sources(ctx context.Context) ([]models.Source, error) {
	var ss []models.Source
	return ss, mapErr(s.db.WithContext(ctx).Order("name").Find(&ss).Error)
}

// Source reads one source by name.
func (s *Store) Source(ctx context.Context, name string) (*models.Source, error) {
	var src models.Source
	if err := s.db.WithContext(ctx).Where("name = ?", name).First(&src).Error; err != nil {
		return nil, fmt.Errorf("source %s: %w", name, mapErr(err))
	}
	return &src, nil
}

// DeleteSource stops accepting a source's webhooks, audited. Its record of
// webhooks (deliveries and merges) goes with it; builds queued or made from
// its merges stay with their modules (a builder still takes a queued one:
// a claim needs only the build's commit and its module's repository), their
// merge link cleared.
func (s *Store) DeleteSource(ctx context.Context, actor, name string) error {
	return s.write(ctx, func(tx *Tx) error {
		var src models.Source
		if err := tx.Where("name = ?", name).First(&src).Error; err != nil {
			return fmt.Errorf("source %s: %w", name, mapErr(err))
		}
		merges := tx.Model(&models.Merge{}).Select("id").Where("source_id = ?", src.ID)
		if err := tx.Model(&models.Build{}).Where("merge_id IN (?)", merges).Update("merge_id", nil).Error; err != nil {
			return err
		}
		d := tx.Where("source_id = ?", src.ID).Delete(&models.Delivery{})
		if d.Error != nil {
			return d.Error
		}
		m := tx.Where("source_id = ?", src.ID).Delete(&models.Merge{})
		if m.Error != nil {
			return m.Error
		}
		if err := tx.Delete(&src).Error; err != nil {
			return err
		}
		return audit(tx, actor, "delete-source", "source/"+name,
			fmt.Sprintf("%s %s; %d delivery(ies) and %d merge(s) removed with it", src.Kind, src.Repository, d.RowsAffected, m.RowsAffected))
	})
}

// Deliver records a delivery once (a replay — the same delivery id, or a
// commit already merged under any id — is answered and recorded, never
// acted on twice) and acts on it: a push to the default branch
// records a merge and queues a build, numbered in merge order, for each
// module of the repository whose source paths it touched.
func (s *Store) Deliver(ctx context.Context, src *models.Source, deliveryID, event string, push *models.Push, status string) (*models.DeliveryOutcome, error) {
	out := &models.DeliveryOutcome{}
	err := s.write(ctx, func(tx *Tx) error {
		*out = models.DeliveryOutcome{Builds: []models.QueuedBuild{}} // afresh, should the transaction run again
		d := &models.Delivery{SourceID: src.ID, DeliveryID: deliveryID, Event: event, Status: status, ReceivedAt: s.Now()}
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(d)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			// On the record by the caller, a row a minute: a captured
			// delivery posted again and again was a row each time.
			out.Status = "duplicate: delivery " + deliveryID + " was already received; not acted on again"
			out.Replay = true
			return nil
		}
		if push == nil {
			out.Status = status
			return audit(tx, "forge:"+src.Name, "webhook", "source/"+src.Name, fmt.Sprintf("%s %s: %s", event, deliveryID, status))
		}
		// The delivery id is an unsigned header: a captured push posted again
		// under new ids must not build old code as a newer build. A commit
		// already merged for the repository is never queued again, whichever
		// of its sources delivers it (a forge and its mirror both send the
		// same push, and both pick the repository's modules). Deliveries for
		// one repository decide one by one: on PostgreSQL under a lock of
		// the repository's (SQLite's writes are one at a time).
		if s.dialect == Postgres {
			if err := tx.Exec("SELECT pg_advisory_xact_lock(hashtext(?))", "mesh-merge:"+strings.ToLower(src.Repository)).Error; err != nil {
				return err
			}
		}
		var seen models.Merge
		err := tx.Where("LOWER(repository) = LOWER(?) AND source_commit = ?", src.Repository, push.Commit).Order("id").First(&seen).Error
		if err == nil {
			out.Status = fmt.Sprintf("duplicate: commit %s was already merged (merge %d); not built again", short7(push.Commit), seen.ID)
			if err := tx.Model(d).Update("status", out.Status).Error; err != nil {
				return err
			}
			return audit(tx, "forge:"+src.Name, "webhook-replay", "source/"+src.Name, fmt.Sprintf("%s: %s", deliveryID, out.Status))
		}
		if !errors.Is(err, gorm.ErrRecordNotFound) {
			return err
		}
		// A source's merges go with it, its builds do not: a commit a
		// merge built one of the repository's modules from is not merged
		// again (a mirror's captured delivery of it, posted again once the
		// forge's source was deleted, was built as a newer build). A build
		// uploaded by hand naming the commit is not a merge's: the
		// commit's first push still builds every module it touches.
		var built struct {
			Name   string
			Number int64
		}
		if err := tx.Raw("SELECT modules.name, builds.number FROM builds JOIN modules ON modules.id = builds.module_id "+
			"WHERE LOWER(modules.repository) = LOWER(?) AND builds.source_commit = ? AND builds.created_by LIKE 'merge:%' ORDER BY builds.id LIMIT 1",
			src.Repository, push.Commit).Scan(&built).Error; err != nil {
			return err
		}
		if built.Name != "" {
			out.Status = fmt.Sprintf("duplicate: commit %s was already built (module %s build %d); not built again", short7(push.Commit), built.Name, built.Number)
			if err := tx.Model(d).Update("status", out.Status).Error; err != nil {
				return err
			}
			return audit(tx, "forge:"+src.Name, "webhook-replay", "source/"+src.Name, fmt.Sprintf("%s: %s", deliveryID, out.Status))
		}
		// Pushes made after this one (onto its commit, one onto the next)
		// were merged already: this one is older (a forge's retries and queues deliver
		// out of order). A module their builds were queued for holds its
		// changes: built now, it would be numbered after them, and "older
		// means a lower number" would run the wrong way (its plan would
		// supersede theirs with older code). A module they did not build
		// is built as ever.
		onto, cut, err := mergedOnto(tx, src.Repository, push)
		if err != nil {
			return err
		}
		paths, _ := json.Marshal(keptPaths(push.Paths))
		m := &models.Merge{SourceID: src.ID, Repository: push.Repository, Commit: push.Commit, Before: push.Before, Author: push.Author,
			Paths: string(paths), CreatedAt: s.Now()}
		if err := tx.Create(m).Error; err != nil {
			return err
		}
		out.Merge = &m.ID
		// Forges take a repository's name in any case: a module that
		// spells it otherwise than its source is still the repository's
		// (matched exactly, its push was taken and nothing built, and the
		// commit, merged, was never built again).
		var mods []models.Module
		if err := tx.Where("LOWER(repository) = LOWER(?)", src.Repository).Order("name").Find(&mods).Error; err != nil {
			return err
		}
		var held, unknown []string
		for _, mod := range mods {
			touched, err := touches(&mod, push.Paths)
			if err != nil {
				return err
			}
			if !touched {
				continue
			}
			if by, ok := onto[mod.ID]; ok {
				held = append(held, fmt.Sprintf("%s (merge %d, %s)", mod.Name, by.ID, short7(by.Commit)))
				continue
			}
			if cut {
				unknown = append(unknown, mod.Name)
				continue
			}
			b, err := queueBuild(tx, &mod, m)
			if err != nil {
				return err
			}
			out.Builds = append(out.Builds, models.QueuedBuild{Module: mod.Name, Number: b.Number})
		}
		out.Status = fmt.Sprintf("merged %s: %d build(s) queued", short7(push.Commit), len(out.Builds))
		if len(held) > 0 {
			out.Status += fmt.Sprintf("; not %s: merges made after it built them already", strings.Join(held, ", "))
		}
		if len(unknown) > 0 {
			out.Status += fmt.Sprintf("; not %s: more than %d merges were made after it, and what they built is not all known: "+
				"build it by hand if it is still needed", strings.Join(unknown, ", "), maxOnto)
		}
		if err := tx.Model(d).Update("status", out.Status).Error; err != nil {
			return err
		}
		return audit(tx, "forge:"+src.Name, "merge", "source/"+src.Name, out.Status)
	})
	return out, err
}

// mergedOnto follows the merges made after push: those made onto its
// commit, those made onto theirs, and so on (pushes delivered ahead of
// this one; a branch forced back and pushed again has several made onto
// one commit). It returns, by module, the first of them that queued a
// build of it. A push made onto one of them (its before is one of their
// commits: a force-push back) is no older push: the branch moved back, a
// new state, and nothing is returned. cut says there were more than
// maxOnto of them: what they built is not all known.
func mergedOnto(tx *Tx, repo string, push *models.Push) (built map[int64]models.Merge, cut bool, err error) {
	built = map[int64]models.Merge{}
	seen := map[string]bool{push.Commit: true}
	for queue := []string{push.Commit}; len(queue) > 0; queue = queue[1:] {
		var next []models.Merge
		if err := tx.Where("LOWER(repository) = LOWER(?) AND before_commit = ?", repo, queue[0]).Order("id").Limit(maxOnto + 1).Find(&next).Error; err != nil {
			return nil, false, err
		}
		for _, m := range next {
			if m.Commit == push.Before {
				return nil, false, nil
			}
			if seen[m.Commit] {
				continue
			}
			if seen[m.Commit] = true; len(seen) > maxOnto+1 {
				return built, true, nil
			}
			var mods []int64
			if err := tx.Model(&models.Build{}).Where("merge_id = ?", m.ID).Pluck("module_id", &mods).Error; err != nil {
				return nil, false, err
			}
			for _, id := range mods {
				if _, ok := built[id]; !ok {
					built[id] = m
				}
			}
			queue = append(queue, m.Commit)
		}
	}
	return built, false, nil
}

// maxOnto bounds the merges mergedOnto follows from one push (each an
// index probe, and those of its builds).
const maxOnto = 1000

func short7(c string) string {
	if len(c) > 7 {
		return c[:7]
	}
	return c
}

// A merge keeps at most maxKeptPaths of the paths its push named, each cut
// to a line of maxKeptPath bytes, and says how many more there were: the
// modules it touched were judged by them all as it came in, and a signed
// push of 90,000 paths (5 MB, under the body's bound) was 5 MB kept for
// good, forty of them in four seconds.
const (
	maxKeptPaths = 100
	maxKeptPath  = 256
)

// keptPaths is what a merge keeps of paths.
func keptPaths(paths []string) []string {
	out := make([]string, 0, min(len(paths), maxKeptPaths+1))
	for i, p := range paths {
		if i == maxKeptPaths {
			out = append(out, fmt.Sprintf("… and %d more", len(paths)-i))
			break
		}
		out = append(out, models.EscapeLogLine(p, maxKeptPath))
	}
	return out
}

// touches reports whether a change to paths touches a module with these
// source paths (none: the whole repository). A push that names no paths
// touches every module of its repository.
func touches(mod *models.Module, paths []string) (bool, error) {
	sp, err := mod.SourcePathList()
	if err != nil || len(sp) == 0 || len(paths) == 0 {
		return true, err
	}
	for _, p := range paths {
		for _, prefix := range sp {
			if p == prefix || strings.HasPrefix(p, strings.TrimSuffix(prefix, "/")+"/") {
				return true, nil
			}
		}
	}
	return false, nil
}

// queueBuild numbers the merge's build of mod under the module's lock, as
// an upload numbers its build: under the repository's alone, an upload
// of the module at once took the same number, and the delivery failed on
// it whole — no delivery, no merge, nothing on the record.
func queueBuild(tx *Tx, mod *models.Module, m *models.Merge) (*models.Build, error) {
	if _, err := lockModuleForBuild(tx, mod.Name); err != nil {
		return nil, err
	}
	var last struct{ N *int64 }
	if err := tx.Model(&models.Build{}).Select("MAX(number) AS n").Where("module_id = ?", mod.ID).Scan(&last).Error; err != nil {
		return nil, err
	}
	b := &models.Build{ModuleID: mod.ID, Number: 1, Commit: m.Commit, Manifest: `{"resources": []}`, State: models.BuildQueued,
		MergeID: &m.ID, CreatedBy: "merge:" + short7(m.Commit), CreatedAt: tx.s.Now()}
	if last.N != nil {
		b.Number = *last.N + 1
	}
	return b, tx.Create(b).Error
}

// ClaimBuild gives a builder the oldest queued build (or one whose lease
// ran out) with a lease; nil when none waits.
func (s *Store) ClaimBuild(ctx context.Context, builder string, lease time.Duration, hostModules bool) (*models.Claimed, error) {
	var out *models.Claimed
	err := s.write(ctx, func(tx *Tx) error {
		now := s.Now()
		var b models.Build
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE", Options: "SKIP LOCKED"})
		}
		q = q.Where("(state = ? OR (state = ? AND lease_until < ?))", models.BuildQueued, models.BuildBuilding, now)
		if !hostModules {
			// A mesh-host module's build becomes a host release: not
			// handed to a claimer who may not make one.
			q = q.Where("module_id NOT IN (SELECT id FROM modules WHERE kind = ?)", models.KindHost)
		}
		err := q.Order("id").First(&b).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		until := now.Add(lease)
		if err := tx.Model(&b).Updates(map[string]any{"state": models.BuildBuilding, "lease_owner": builder, "lease_until": until}).Error; err != nil {
			return err
		}
		var mod models.Module
		if err := tx.Where("id = ?", b.ModuleID).First(&mod).Error; err != nil {
			return err
		}
		out = &models.Claimed{ID: b.ID, Module: mod.Name, Number: b.Number, Commit: b.Commit, Repository: mod.Repository}
		return audit(tx, builder, "claim-build", "module/"+mod.Name, fmt.Sprintf("build %d", b.Number))
	})
	return out, err
}

// FinishBuild fills a claimed build with its artifact and manifest; the
// module's first build becomes current. It returns the build and its
// module as it stood before (what follows a build is the caller's rule).
func (tx *Tx) FinishBuild(builder string, id int64, digest string, size int64, manifest string, artifact *models.Blob) (*models.Build, *models.Module, error) {
	b, mod, err := tx.leasedBuild(builder, id)
	if err != nil {
		return nil, nil, err
	}
	if artifact != nil {
		if err := needBlob(tx, digest); err != nil {
			return nil, nil, err
		}
	}
	if err := tx.Model(b).Updates(map[string]any{"state": models.BuildReady, "digest": digest, "size": size,
		"manifest": manifest, "lease_owner": "", "lease_until": nil}).Error; err != nil {
		return nil, nil, err
	}
	b.State, b.Digest, b.Size, b.Manifest = models.BuildReady, digest, size, manifest
	if err := audit(tx, builder, "finish-build", "module/"+mod.Name, fmt.Sprintf("build %d %s", b.Number, digest)); err != nil {
		return nil, nil, err
	}
	before := *mod
	if mod.CurrentBuild == nil {
		return b, &before, setCurrent(tx, mod, b.Number)
	}
	return b, &before, nil
}

// FailBuild ends a claimed build failed, with the reason on the record:
// its commit's own content was refused, which no retry can fix, so it is
// never claimed again.
func (tx *Tx) FailBuild(builder string, id int64, reason string) error {
	b, mod, err := tx.leasedBuild(builder, id)
	if err != nil {
		return err
	}
	if err := tx.Model(b).Updates(map[string]any{"state": models.BuildFailed, "lease_owner": "", "lease_until": nil}).Error; err != nil {
		return err
	}
	return audit(tx, builder, "fail-build", "module/"+mod.Name, fmt.Sprintf("build %d: %s", b.Number, reason))
}

// leasedBuild reads a build a builder may finish: not finished or failed,
// and not leased to another builder whose lease still runs.
func (tx *Tx) leasedBuild(builder string, id int64) (*models.Build, *models.Module, error) {
	var b models.Build
	if err := tx.Where("id = ?", id).First(&b).Error; err != nil {
		return nil, nil, fmt.Errorf("build %d: %w", id, mapErr(err))
	}
	switch {
	case b.State == models.BuildReady:
		return nil, nil, fmt.Errorf("%w: build %d is already finished", models.ErrConflict, b.Number)
	case b.State == models.BuildFailed:
		return nil, nil, fmt.Errorf("%w: build %d failed; its commit needs a new build", models.ErrConflict, b.Number)
	case b.State == models.BuildBuilding && b.LeaseOwner != builder && b.LeaseUntil != nil && b.LeaseUntil.After(tx.s.Now()):
		return nil, nil, fmt.Errorf("%w: build %d is leased to %s", models.ErrConflict, b.Number, b.LeaseOwner)
	}
	var mod models.Module
	if err := tx.Where("id = ?", b.ModuleID).First(&mod).Error; err != nil {
		return nil, nil, err
	}
	return &b, &mod, nil
}

// BuildModule is the module of the build with this id.
func (s *Store) BuildModule(ctx context.Context, id int64) (*models.Module, error) {
	var mod models.Module
	err := s.db.WithContext(ctx).Where("id = (SELECT module_id FROM builds WHERE id = ?)", id).First(&mod).Error
	if err != nil {
		return nil, fmt.Errorf("build %d: %w", id, mapErr(err))
	}
	return &mod, nil
}
