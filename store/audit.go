package store

import (
	"context"

	"mesh/models"
)

// audit records who did what in the transaction that did it.
func audit(tx *Tx, actor, action, target, detail string) error {
	return tx.Create(&models.AuditEvent{At: tx.s.Now(), Actor: actor, Action: action, Target: target, Detail: detail}).Error
}

// Audit records an event on its own (refusals, logins).
func (s *Store) Audit(ctx context.Context, actor, action, target, detail string) error {
	return s.write(ctx, func(tx *Tx) error { return audit(tx, actor, action, target, detail) })
}

// AuditEvents lists events newest first.
func (s *Store) AuditEvents(ctx context.Context, limit int, cursor int64) ([]models.AuditEvent, error) {
	var es []models.AuditEvent
	q := s.db.WithContext(ctx).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	return es, mapErr(q.Find(&es).Error)
}
