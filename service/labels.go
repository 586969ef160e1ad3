package service

import (
	"context"

	"mesh/models"
)

// SetLabels is an operator replacing a machine's labels.
type SetLabels struct {
	Machine string
	Labels  map[string]string
	IfMatch *int64
	DryRun  bool
}

// Validate checks the machine's name and every label.
func (r *SetLabels) Validate() error {
	if err := models.ValidName("machine", r.Machine); err != nil {
		return err
	}
	if r.Labels == nil {
		// A body without them is a client's mistake, not "remove every
		// label" (it was taken so: the machine lost the modules its
		// labels selected).
		return models.Invalid("labels", "required (an object of KEY: value; {} removes every label)")
	}
	return models.ValidLabels("labels", r.Labels)
}

// SetLabels replaces a machine's labels under If-Match: it gains the
// modules whose selectors now match and loses those that no longer do,
// with a new generation (trigger label). With DryRun it answers the same
// and changes nothing.
func (s *Service) SetLabels(ctx context.Context, actor string, r SetLabels) (*models.LabelChange, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return s.Store.SetLabels(ctx, actor, r.Machine, r.IfMatch, r.Labels, r.DryRun)
}
