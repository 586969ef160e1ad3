package store

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"gorm.io/gorm/clause"

	"mesh/models"
)

// UpdateModule changes a module's settings under its ETag (ifMatch, as
// models.Module.ETag gives it), audited: apply changes the module read
// (the service's rules); a changed selector gives the module to the
// machines it now matches and takes it from those it no longer does (a
// person's assignment holds), each with a new generation (trigger label),
// in the same transaction. preview answers the same and changes nothing.
func (s *Store) UpdateModule(ctx context.Context, actor, name, ifMatch string, preview bool, apply func(*models.Module) error) (*models.ModuleChange, error) {
	return dryRun(ctx, s, preview, func(tx *Tx) (*models.ModuleChange, error) {
		mod, err := lockModule(tx, name)
		if err != nil {
			return nil, err
		}
		if ifMatch == "" {
			return nil, fmt.Errorf("%w (for a module, the ETag GET gave)", models.ErrPreconditionNeeded)
		}
		if tag := mod.ETag(); ifMatch != tag {
			return nil, fmt.Errorf("%w: module %s is at %s, the request was made from %s", models.ErrStaleGeneration, name, tag, ifMatch)
		}
		before := *mod
		if err := apply(mod); err != nil {
			return nil, err
		}
		if err := tx.Model(&models.Module{}).Where("id = ?", mod.ID).Updates(map[string]any{
			"repository": mod.Repository, "source_paths": mod.SourcePaths, "tiers": mod.Tiers,
			"tier_deadline_seconds": mod.TierDeadlineSeconds, "on_failure": mod.OnFailure, "selector": mod.Selector,
		}).Error; err != nil {
			return nil, err
		}
		out := &models.ModuleChange{Module: mod, Changes: []models.SelectionChange{}}
		if mod.Selector != before.Selector {
			if err := lockSelection(tx); err != nil {
				return nil, err
			}
			var ms []models.Machine
			if err := tx.Select("id", "name").Order("name").Find(&ms).Error; err != nil {
				return nil, err
			}
			changes, bumped, err := reselect(tx, ms, []models.Module{*mod})
			if err != nil {
				return nil, err
			}
			if err := bumpGenerations(tx, bumped, models.TriggerLabel); err != nil {
				return nil, err
			}
			out.Changes = nonNilChanges(changes)
		}
		return out, audit(tx, actor, "update-module", "module/"+name, describeModuleChange(&before, mod, out.Changes))
	})
}

// lockModule reads a module for update (a row lock on PostgreSQL).
func lockModule(tx *Tx, name string) (*models.Module, error) {
	var mod models.Module
	q := tx.DB
	if tx.s.dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	if err := q.Where("name = ?", name).First(&mod).Error; err != nil {
		return nil, fmt.Errorf("module %s: %w", name, mapErr(err))
	}
	return &mod, nil
}

func describeModuleChange(a, b *models.Module, changes []models.SelectionChange) string {
	var d []string
	for _, f := range []struct{ name, was, is string }{
		{"repository", a.Repository, b.Repository}, {"source_paths", a.SourcePaths, b.SourcePaths},
		{"tiers", a.Tiers, b.Tiers}, {"on_failure", a.OnFailure, b.OnFailure}, {"selector", a.Selector, b.Selector},
		{"tier_deadline", fmt.Sprint(a.TierDeadlineSeconds, "s"), fmt.Sprint(b.TierDeadlineSeconds, "s")},
	} {
		if f.was != f.is {
			d = append(d, fmt.Sprintf("%s %q → %q", f.name, f.was, f.is))
		}
	}
	if len(changes) > 0 {
		d = append(d, fmt.Sprintf("%d machine(s) gain or lose it", len(changes)))
	}
	if len(d) == 0 {
		return "no change"
	}
	return strings.Join(d, "; ")
}

// DeleteModule removes a module no machine runs, with its builds and
// plans, audited. A module still assigned or selected anywhere, or that a
// machine reports running, is a conflict naming them.
func (s *Store) DeleteModule(ctx context.Context, actor, name string) error {
	return s.write(ctx, func(tx *Tx) error {
		mod, err := lockModule(tx, name)
		if err != nil {
			return err
		}
		var assigned []string
		if err := tx.Model(&models.Machine{}).Joins("JOIN assignments ON assignments.machine_id = machines.id").
			Where("assignments.module_id = ?", mod.ID).Order("machines.name").Limit(6).Pluck("machines.name", &assigned).Error; err != nil {
			return err
		}
		if len(assigned) > 0 {
			return fmt.Errorf("%w: module %s is assigned to (or selected by) %s; unassign it and clear its selector first",
				models.ErrConflict, name, listSome(assigned))
		}
		// running is JSON keyed by module name: the LIKE narrows, the
		// decode decides.
		var ms []models.Machine
		if err := tx.Select("id", "name", "running").Where(`running LIKE ? ESCAPE '\'`, "%"+likeEscape(`"`+name+`"`)+"%").
			Order("name").Find(&ms).Error; err != nil {
			return err
		}
		var running []string
		for i := range ms {
			rb, err := ms[i].RunningBuilds()
			if _, ok := rb[name]; ok || err != nil {
				running = append(running, ms[i].Name)
			}
		}
		if len(running) > 0 {
			return fmt.Errorf("%w: module %s still runs on %s; it is deleted once no machine reports it running",
				models.ErrConflict, name, listSome(running))
		}
		var planIDs []int64
		if err := tx.Model(&models.Plan{}).Where("module_id = ?", mod.ID).Pluck("id", &planIDs).Error; err != nil {
			return err
		}
		if len(planIDs) > 0 {
			if err := tx.Where("plan_id IN ?", planIDs).Delete(&models.PlanStep{}).Error; err != nil {
				return err
			}
		}
		for _, t := range []any{&models.MachineTarget{}, &models.Plan{}, &models.Build{}} {
			if err := tx.Where("module_id = ?", mod.ID).Delete(t).Error; err != nil {
				return err
			}
		}
		if err := tx.Delete(&models.Module{}, mod.ID).Error; err != nil {
			return err
		}
		return audit(tx, actor, "delete-module", "module/"+name, fmt.Sprintf("%d plan(s) and its builds with it", len(planIDs)))
	})
}

// listSome names up to five things, then says how many more.
func listSome(names []string) string {
	sort.Strings(names)
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + " and more"
	}
	return strings.Join(names, ", ")
}

// likeEscape escapes LIKE's wildcards (names hold '_').
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
