package service

import (
	"context"
	"encoding/json"
	"time"

	"mesh/auth"
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

// CreateUser is a new person or builder.
type CreateUser struct {
	Name, Role, Password string
}

// Validate checks the name and role; the password's rules are
// auth.HashPassword's.
func (r *CreateUser) Validate() error {
	if err := models.ValidName("name", r.Name); err != nil {
		return err
	}
	if !models.ValidRole(r.Role) {
		return models.Invalid("role", "one of viewer, operator, admin, builder")
	}
	return nil
}

// CreateUser adds a user with the password hashed.
func (s *Service) CreateUser(ctx context.Context, actor string, req *CreateUser) (*models.User, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	h, err := auth.HashPassword(req.Password)
	if err != nil {
		return nil, err
	}
	u := &models.User{Name: req.Name, Role: req.Role, PasswordHash: h}
	return u, s.Store.CreateUser(ctx, actor, u)
}

// Join tokens last a day unless asked otherwise, thirty days at most.
const (
	DefaultJoinTokenTTL = 24 * time.Hour
	MaxJoinTokenTTL     = 30 * 24 * time.Hour
)

// CreateJoinToken makes a single-use join token; only its hash is kept.
// expiresIn is a duration ("24h"; empty: the default), capped at 30 days.
// labels are given to the machine that enrols with it: a host never
// chooses its own labels, so it cannot give itself modules.
func (s *Service) CreateJoinToken(ctx context.Context, actor, expiresIn string, labels map[string]string, now time.Time) (token string, expires time.Time, id int64, err error) {
	if err := models.ValidLabels("labels", labels); err != nil {
		return "", time.Time{}, 0, err
	}
	ttl := DefaultJoinTokenTTL
	if expiresIn != "" {
		d, err := time.ParseDuration(expiresIn)
		if err != nil || d <= 0 {
			return "", time.Time{}, 0, models.Invalid("expires_in", "a positive duration like 24h")
		}
		ttl = min(d, MaxJoinTokenTTL)
	}
	token, expires = auth.NewSecret(), now.Add(ttl)
	lj, _ := json.Marshal(labels)
	if len(labels) == 0 {
		lj = nil
	}
	id, err = s.Store.CreateLabelledJoinToken(ctx, actor, auth.HashToken(token), expires, string(lj))
	return token, expires, id, err
}
