package service

import (
	"context"

	"mesh/models"
)

// SetVariables is a machine's new variables, under If-Match.
type SetVariables struct {
	Machine   string
	IfMatch   *int64
	Variables map[string]string
}

// Validate checks every key and value, in the words the API and the
// dashboard both show.
func (r *SetVariables) Validate() error {
	if r.Variables == nil {
		return models.Invalid("variables", "required (an object of KEY: value)")
	}
	return models.ValidVariables(r.Variables)
}

// SetVariables replaces a machine's variables; the store bumps its
// generation.
func (s *Service) SetVariables(ctx context.Context, actor string, req *SetVariables) (*models.Machine, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return s.Store.SetVariables(ctx, actor, req.Machine, req.IfMatch, req.Variables)
}
