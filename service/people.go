package service

import (
	"context"
	"fmt"
	"time"

	"mesh/auth"
	"mesh/models"
	"mesh/store"
)

// UpdateUser is an admin changing a user's role, or disabling or enabling
// them; a nil field stays as it is.
type UpdateUser struct {
	Name     string
	Role     *string
	Disabled *bool
}

// Validate checks the name and the role.
func (r *UpdateUser) Validate() error {
	if err := models.ValidName("name", r.Name); err != nil {
		return err
	}
	if r.Role != nil && !models.ValidRole(*r.Role) {
		return models.Invalid("role", "one of viewer, operator, admin, builder")
	}
	if r.Role == nil && r.Disabled == nil {
		return models.Invalid("body", "nothing to change: give role or disabled")
	}
	return nil
}

// UpdateUser changes a user. Disabling them, or changing their role, ends
// every session and API token they held, on every instance (the one
// revocation mechanism); a disabled user cannot log in. An admin cannot
// disable themselves, and the last enabled admin keeps the role.
func (s *Service) UpdateUser(ctx context.Context, actor, actorUser string, r UpdateUser) (*models.User, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if r.Name == actorUser && r.Disabled != nil && *r.Disabled {
		return nil, fmt.Errorf("%w: you cannot disable yourself", models.ErrConflict)
	}
	if r.Name == actorUser && r.Role != nil {
		// An admin's own role is another admin's to change (DESIGN, the
		// users' routes): one slip here, and no one may put it back.
		return nil, fmt.Errorf("%w: you cannot change your own role; another admin may", models.ErrConflict)
	}
	return s.Store.ChangeUser(ctx, actor, r.Name, store.UserChange{Role: r.Role, Disabled: r.Disabled, SessionTTL: auth.PersonTokenTTL})
}

// API tokens last 90 days unless asked otherwise, a year at most: every
// token expires.
const (
	DefaultAPITokenTTL = 90 * 24 * time.Hour
	MaxAPITokenTTL     = 365 * 24 * time.Hour
)

// CreateAPIToken is a person asking for a long-lived token.
type CreateAPIToken struct {
	// Name says what the token is for ("ci-main").
	Name string
	// Role defaults to the creator's; never more than it (models.MayGrant).
	Role string
	// ExpiresIn is a duration ("720h"); empty: DefaultAPITokenTTL.
	ExpiresIn string
}

// Validate checks the request against the creator's role and fills defaults.
func (r *CreateAPIToken) Validate(creatorRole string) (time.Duration, error) {
	if err := models.ValidName("name", r.Name); err != nil {
		return 0, err
	}
	if r.Role == "" {
		r.Role = creatorRole
	}
	if err := models.MayGrant(creatorRole, r.Role); err != nil {
		return 0, err
	}
	ttl := DefaultAPITokenTTL
	if r.ExpiresIn != "" {
		d, err := time.ParseDuration(r.ExpiresIn)
		if err != nil || d < time.Minute {
			return 0, models.Invalid("expires_in", "a duration of at least 1m, like 720h")
		}
		if d > MaxAPITokenTTL {
			return 0, models.Invalid("expires_in", fmt.Sprintf("at most %s (a year); every API token expires", MaxAPITokenTTL))
		}
		ttl = d
	}
	return ttl, nil
}

// CreateAPIToken makes an API token for user (of role creatorRole): the
// token is returned once, only its hash is kept.
func (s *Service) CreateAPIToken(ctx context.Context, actor, user, creatorRole string, r CreateAPIToken) (string, *models.APIToken, error) {
	ttl, err := r.Validate(creatorRole)
	if err != nil {
		return "", nil, err
	}
	t := &models.APIToken{ID: "at-" + auth.NewSecret()[:16], Name: r.Name, UserName: user, Role: r.Role,
		ExpiresAt: s.Auth.Now().Add(ttl).Truncate(time.Second)}
	tok, err := s.Auth.IssueAPIToken(user, t.Role, t.ID, t.ExpiresAt)
	if err != nil {
		return "", nil, err
	}
	t.TokenHash = auth.HashToken(tok)
	if err := s.Store.CreateAPIToken(ctx, actor, t); err != nil {
		return "", nil, err
	}
	return tok, t, nil
}

// RevokeAPIToken revokes an API token on every instance. An admin revokes
// any; others only their own (another's is not found).
func (s *Service) RevokeAPIToken(ctx context.Context, actor, user, role, id string) (*models.APIToken, error) {
	if id == "" {
		return nil, models.Invalid("id", "an API token's id")
	}
	owner := user
	if role == models.RoleAdmin {
		owner = ""
	}
	return s.Store.RevokeAPIToken(ctx, actor, owner, id)
}
