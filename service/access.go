package service

import (
	"context"

	"mesh/models"
)

// RevokeJoinToken makes an unused join token unspendable: enrolment refuses
// it as it refuses a used one. A used token is a conflict (its machine is
// deleted instead); revoking twice changes nothing.
func (s *Service) RevokeJoinToken(ctx context.Context, actor string, id int64) (*models.JoinToken, error) {
	if id <= 0 {
		return nil, models.Invalid("id", "a join token's id, a positive number")
	}
	return s.Store.RevokeJoinToken(ctx, actor, id)
}

// DeleteSource stops accepting a forge source's webhooks. Its deliveries and
// merges go with it; the builds they queued stay with their modules.
func (s *Service) DeleteSource(ctx context.Context, actor, name string) error {
	if err := models.ValidName("source", name); err != nil {
		return err
	}
	return s.Store.DeleteSource(ctx, actor, name)
}
