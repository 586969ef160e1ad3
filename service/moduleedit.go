package service

import (
	"context"
	"encoding/json"
	"time"

	"mesh/models"
)

// UpdateModule is a change of a module's settings; nil fields stay. Its
// kind and name never change (builds and plans depend on them).
type UpdateModule struct {
	Name         string
	Repository   *string
	SourcePaths  *[]string
	Tiers        *[]models.Tier
	TierDeadline *string
	OnFailure    *string
	// Selector gives the module to every machine whose labels match
	// (models.ParseSelector); "" takes it from those it selected.
	Selector *string
	// IfMatch is the module's ETag as read; DryRun previews.
	IfMatch string
	DryRun  bool
}

// apply checks the change against the module as it stands and makes it,
// with the rules a new module is held to (CreateModule.Validate).
func (r *UpdateModule) apply(m *models.Module) error {
	sp, err := m.SourcePathList()
	if err != nil {
		return err
	}
	tiers, err := m.TierList()
	if err != nil {
		return err
	}
	c := CreateModule{Name: m.Name, Kind: m.Kind, Repository: m.Repository, SourcePaths: sp, Tiers: tiers,
		TierDeadline: (time.Duration(m.TierDeadlineSeconds) * time.Second).String(), OnFailure: m.OnFailure}
	if r.Repository != nil {
		c.Repository = *r.Repository
	}
	if r.SourcePaths != nil {
		c.SourcePaths = *r.SourcePaths
	}
	if r.Tiers != nil {
		c.Tiers = *r.Tiers
	}
	if r.TierDeadline != nil {
		c.TierDeadline = *r.TierDeadline
	}
	if r.OnFailure != nil {
		c.OnFailure = *r.OnFailure
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if r.Selector != nil {
		sel, err := models.ParseSelector(*r.Selector)
		if err != nil {
			return err
		}
		if len(sel) > 0 && m.Kind == models.KindHost {
			return models.Invalid("selector", "a host module goes by host releases and rollouts, never by a selector")
		}
		m.Selector = sel.String()
	}
	spj, _ := json.Marshal(c.SourcePaths)
	tj, _ := json.Marshal(c.Tiers)
	d, _ := time.ParseDuration(c.TierDeadline)
	m.Repository, m.SourcePaths, m.Tiers, m.OnFailure = c.Repository, string(spj), string(tj), c.OnFailure
	m.TierDeadlineSeconds = int64(d / time.Second)
	return nil
}

// UpdateModule changes a module under its ETag; with DryRun it answers
// which machines would gain or lose it and changes nothing.
func (s *Service) UpdateModule(ctx context.Context, actor string, r UpdateModule) (*models.ModuleChange, error) {
	if err := models.ValidName("module", r.Name); err != nil {
		return nil, err
	}
	if r.Repository == nil && r.SourcePaths == nil && r.Tiers == nil && r.TierDeadline == nil && r.OnFailure == nil && r.Selector == nil {
		return nil, models.Invalid("body", "nothing to change: give repository, source_paths, tiers, tier_deadline, on_failure or selector")
	}
	return s.Store.UpdateModule(ctx, actor, r.Name, r.IfMatch, r.DryRun, r.apply)
}

// DeleteModule removes a module no machine runs, with its builds and plans.
func (s *Service) DeleteModule(ctx context.Context, actor, name string) error {
	if err := models.ValidName("module", name); err != nil {
		return err
	}
	return s.Store.DeleteModule(ctx, actor, name)
}
