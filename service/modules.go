package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"mesh/models"
)

// CreateModule is a new module.
type CreateModule struct {
	Name, Kind, Repository string
	SourcePaths            []string
	Tiers                  []models.Tier
	// TierDeadline is a duration ("10m"); empty: the default.
	TierDeadline string
	// OnFailure is halt (the default) or rollback.
	OnFailure string
}

// Validate checks the module and fills its defaults.
func (r *CreateModule) Validate() error {
	if err := models.ValidName("name", r.Name); err != nil {
		return err
	}
	if r.Kind == "" {
		r.Kind = models.KindService
	}
	if r.Kind != models.KindService && r.Kind != models.KindHost && r.Kind != models.KindController {
		return models.Invalid("kind", "one of service, host, controller")
	}
	if r.SourcePaths == nil {
		r.SourcePaths = []string{}
	}
	if r.Tiers == nil {
		r.Tiers = models.DefaultTiers
	}
	for i, t := range r.Tiers {
		if (t.Machines > 0) == (t.Percent > 0) || t.Machines < 0 || t.Percent < 0 || t.Percent > 100 {
			return models.Invalid(fmt.Sprintf("tiers[%d]", i), `a tier is {"machines": N} or {"percent": 1-100}`)
		}
	}
	if r.TierDeadline != "" {
		d, err := time.ParseDuration(r.TierDeadline)
		if err != nil || d < time.Minute {
			return models.Invalid("tier_deadline", "a duration of at least 1m, like 10m")
		}
	}
	switch r.OnFailure {
	case "":
		r.OnFailure = models.OnFailureHalt
	case models.OnFailureHalt:
	case models.OnFailureRollback:
		if r.Kind != models.KindService {
			// A mesh-controller or mesh-host module is never rolled back by
			// policy: a person decides.
			return models.Invalid("on_failure", "rollback is for service modules only; a "+r.Kind+" module halts")
		}
	default:
		return models.Invalid("on_failure", "halt or rollback")
	}
	return nil
}

// CreateModule adds a module.
func (s *Service) CreateModule(ctx context.Context, actor string, req *CreateModule) (*models.Module, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	sp, _ := json.Marshal(req.SourcePaths)
	ts, _ := json.Marshal(req.Tiers)
	m := &models.Module{Name: req.Name, Kind: req.Kind, Repository: req.Repository, SourcePaths: string(sp), Tiers: string(ts),
		TierDeadlineSeconds: 600, OnFailure: req.OnFailure}
	if req.TierDeadline != "" {
		d, _ := time.ParseDuration(req.TierDeadline)
		m.TierDeadlineSeconds = int64(d / time.Second)
	}
	return m, s.Store.CreateModule(ctx, actor, m)
}
