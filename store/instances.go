package store

import (
	"context"
	"encoding/json"
	"time"

	"gorm.io/gorm/clause"

	"mesh/models"
)

// RegisterInstance records a controller process.
func (s *Store) RegisterInstance(ctx context.Context, in *models.Instance) error {
	now := s.Now()
	in.StartedAt, in.HeartbeatAt = now, now
	return mapErr(s.db.WithContext(ctx).Clauses(clause.OnConflict{UpdateAll: true}).Create(in).Error)
}

// OlderInstancesServing reports whether an instance of a build that knows
// no batch envelopes (store schema below models.SchemaBatchEnvelopes) is
// starting or serving and has beaten its heart since the time given.
func (s *Store) OlderInstancesServing(ctx context.Context, since time.Time) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.Instance{}).
		Where("state IN ? AND heartbeat_at > ? AND store_schema < ?",
			[]string{models.InstanceStarting, models.InstanceServing}, since, models.SchemaBatchEnvelopes).
		Count(&n).Error
	return n > 0, mapErr(err)
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

// AdvertisedNamesKept is how long after an instance was last heard from
// its --advertise names stay the controller's: hosts may still list a
// stopped instance's URL for a while, and a name renamed away is free
// again after it (each start writes a row of its own, never removed).
const AdvertisedNamesKept = 30 * 24 * time.Hour

// AdvertisedNames are the names every instance of the store heard from
// within AdvertisedNamesKept was started to be reached under (--advertise),
// each once: another instance's are the controller's too.
func (s *Store) AdvertisedNames(ctx context.Context) ([]string, error) {
	var lists []string
	if err := s.db.WithContext(ctx).Model(&models.Instance{}).Where("advertise <> '' AND heartbeat_at > ?", s.Now().Add(-AdvertisedNamesKept)).
		Distinct().Pluck("advertise", &lists).Error; err != nil {
		return nil, mapErr(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range lists {
		var names []string
		if json.Unmarshal([]byte(l), &names) != nil {
			continue
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// Instances lists controller instances: the live first (not stopped, and
// heard from within models.InstanceSilentAfter), then the rest; newest
// first within each. Every start
// is a row: a replica that crash-looped wrote enough newer stopped rows to
// push the serving instances off the page.
func (s *Store) Instances(ctx context.Context, limit int) ([]models.Instance, error) {
	var is []models.Instance
	// Live: not stopped, and heard from within a minute (one that crashed
	// never wrote "stopped"); as Instance.Observed says unresponsive.
	live := clause.OrderBy{Expression: clause.Expr{SQL: "CASE WHEN state <> ? AND heartbeat_at > ? THEN 0 ELSE 1 END, started_at DESC",
		Vars: []any{models.InstanceStopped, s.Now().Add(-models.InstanceSilentAfter)}, WithoutParentheses: true}}
	return is, mapErr(s.db.WithContext(ctx).Clauses(live).Limit(limit).Find(&is).Error)
}
