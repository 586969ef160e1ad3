package store

import (
	"context"

	"gorm.io/gorm/clause"

	"mesh/models"
)

// RegisterInstance records a controller process.
func (s *Store) RegisterInstance(ctx context.Context, in *models.Instance) error {
	now := s.Now()
	in.StartedAt, in.HeartbeatAt = now, now
	return mapErr(s.db.WithContext(ctx).Clauses(clause.OnConflict{UpdateAll: true}).Create(in).Error)
}

// SetInstanceState moves an instance to a state and beats its heart.
func (s *Store) SetInstanceState(ctx context.Context, id, state string) error {
	return mapErr(s.db.WithContext(ctx).Model(&models.Instance{}).Where("id = ?", id).
		Updates(map[string]any{"state": state, "heartbeat_at": s.Now()}).Error)
}

// Heartbeat records that an instance is alive.
func (s *Store) Heartbeat(ctx context.Context, id string) error {
	return mapErr(s.db.WithContext(ctx).Model(&models.Instance{}).Where("id = ?", id).
		Update("heartbeat_at", s.Now()).Error)
}

// Instances lists controller instances, newest first.
func (s *Store) Instances(ctx context.Context, limit int) ([]models.Instance, error) {
	var is []models.Instance
	return is, mapErr(s.db.WithContext(ctx).Order("started_at DESC").Limit(limit).Find(&is).Error)
}
