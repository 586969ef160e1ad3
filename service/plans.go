package service

import (
	"context"

	"mesh/models"
)

// CreatePlan is a person asking for a plan of a build by hand.
type CreatePlan struct {
	Module string
	Build  int64
	// HostReleaseFirst is the host release to roll out to the plan's
	// machines before its first tier ("" none): the plan's host step.
	HostReleaseFirst string
}

// Validate checks what can be checked without the store.
func (r *CreatePlan) Validate() error {
	if err := models.ValidName("module", r.Module); err != nil {
		return err
	}
	if r.Build <= 0 {
		return models.Invalid("build", "a build number")
	}
	return models.ValidVersion("host_release_first", r.HostReleaseFirst, false)
}

// CreatePlan records a plan by hand (store.CreatePlan says what it may come
// to): one that would downgrade mesh-controller below this instance's
// build, another live instance's or a control node's is refused; one told
// to roll out a host release first starts that rollout with it.
func (s *Service) CreatePlan(ctx context.Context, actor string, r CreatePlan) (*models.PlanView, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return s.Store.CreatePlan(ctx, actor, r.Module, r.Build, s.ControllerBuild, r.HostReleaseFirst)
}
