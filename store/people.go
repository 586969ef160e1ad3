package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// UserChange is what an admin changes of a user: nil fields stay.
type UserChange struct {
	Role     *string
	Disabled *bool
	// SessionTTL is how long a login's token lasts: a RevokedUser
	// revocation is kept at least that long.
	SessionTTL time.Duration
}

// ChangeUser changes a user's role or disables (or enables) them, audited,
// in one transaction. A disable or a role change revokes every token the
// user held (sessions and API tokens: one RevokedUser revocation through
// the one mechanism), so no token carries a role its user no longer has.
// The last enabled admin cannot be disabled or lose the role (409).
func (s *Store) ChangeUser(ctx context.Context, actor, name string, ch UserChange) (*models.User, error) {
	return Write(ctx, s, func(tx *Tx) (*models.User, error) {
		var u models.User
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("name = ?", name).First(&u).Error; err != nil {
			return nil, fmt.Errorf("user %s: %w", name, mapErr(err))
		}
		now := s.Now()
		updates := map[string]any{}
		var did []string
		revokeAll := false
		if ch.Role != nil && *ch.Role != u.Role {
			updates["role"] = *ch.Role
			did = append(did, "role "+u.Role+" → "+*ch.Role)
			revokeAll = true
		}
		if ch.Disabled != nil && *ch.Disabled != (u.DisabledAt != nil) {
			if *ch.Disabled {
				updates["disabled_at"], updates["disabled_by"] = now, actor
				did = append(did, "disabled")
				revokeAll = true
			} else {
				updates["disabled_at"], updates["disabled_by"] = nil, ""
				did = append(did, "enabled")
			}
		}
		if len(updates) == 0 {
			return &u, nil
		}
		losesAdmin := u.Role == models.RoleAdmin && u.DisabledAt == nil &&
			((ch.Role != nil && *ch.Role != models.RoleAdmin) || (ch.Disabled != nil && *ch.Disabled))
		if losesAdmin {
			if s.dialect == Postgres {
				// Two admins demoting each other at once: one waits.
				if err := tx.Exec("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE").Error; err != nil {
					return nil, err
				}
			}
			var admins int64
			if err := tx.Model(&models.User{}).Where("role = ? AND disabled_at IS NULL AND name <> ?", models.RoleAdmin, name).Count(&admins).Error; err != nil {
				return nil, err
			}
			if admins == 0 {
				return nil, fmt.Errorf("%w: %s is the last enabled admin; make another admin first", models.ErrConflict, name)
			}
		}
		if err := tx.Model(&u).Updates(updates).Error; err != nil {
			return nil, err
		}
		if revokeAll {
			if err := revokeUser(tx, actor, name, now, ch.SessionTTL, strings.Join(did, ", ")); err != nil {
				return nil, err
			}
		}
		if err := audit(tx, actor, "update-user", "user/"+name, strings.Join(did, ", ")); err != nil {
			return nil, err
		}
		var out models.User
		return &out, tx.Where("name = ?", name).First(&out).Error
	})
}

// revokeUser refuses every token of user issued up to now: one revocation,
// kept until the last of them would have expired (a session's lifetime, or
// the user's longest-lived API token), and their API tokens listed revoked.
func revokeUser(tx *Tx, actor, user string, now time.Time, sessionTTL time.Duration, why string) error {
	exp := now.Add(sessionTTL)
	// The row, not MAX(): SQLite answers an aggregate of times as text.
	var last []models.APIToken
	if err := tx.Where("user_name = ? AND revoked_at IS NULL", user).Order("expires_at DESC").Limit(1).Find(&last).Error; err != nil {
		return err
	}
	if len(last) > 0 && last[0].ExpiresAt.After(exp) {
		exp = last[0].ExpiresAt
	}
	// Each live API token revoked by its id too: the user's revocation is
	// judged by the time a token was issued, on the clock of the instance
	// that issued it, and one whose clock ran ahead issued tokens after
	// the act by this one's (a disabled person's API token then worked for
	// its year, listed revoked). By id, a revocation is no clock's.
	var live []models.APIToken
	if err := tx.Where("user_name = ? AND revoked_at IS NULL AND expires_at > ?", user, now).Find(&live).Error; err != nil {
		return err
	}
	for _, t := range live {
		if _, err := revoke(tx, actor, &models.Revocation{TokenID: t.ID, Kind: models.RevokedAPIToken,
			Reason: "API token " + t.Name + " revoked: " + why, ExpiresAt: t.ExpiresAt}); err != nil {
			return err
		}
	}
	if err := tx.Model(&models.APIToken{}).Where("user_name = ? AND revoked_at IS NULL AND expires_at > ?", user, now).
		Updates(map[string]any{"revoked_at": now, "revoked_by": actor}).Error; err != nil {
		return err
	}
	_, err := revoke(tx, actor, &models.Revocation{TokenID: models.UserRevocationID(user, now), Kind: models.RevokedUser,
		Reason: why, ExpiresAt: exp})
	return err
}

// CreateAPIToken keeps a new API token (its hash), audited. The user must
// exist and be enabled.
func (s *Store) CreateAPIToken(ctx context.Context, actor string, t *models.APIToken) error {
	return s.write(ctx, func(tx *Tx) error {
		var u models.User
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"}) // the count below, one create at a time
		}
		if err := q.Where("name = ?", t.UserName).First(&u).Error; err != nil {
			return fmt.Errorf("user %s: %w", t.UserName, mapErr(err))
		}
		if u.DisabledAt != nil {
			return fmt.Errorf("%w: user %s is disabled", models.ErrForbidden, u.Name)
		}
		// The role as it is now, under the row's lock: the caller judged
		// the token's role by the session's, which a demotion committed
		// since has lowered, and a token stored after that demotion's
		// revocation would outlive it with the old role.
		if err := models.MayGrant(u.Role, t.Role); err != nil {
			return fmt.Errorf("%w (user %s is %s now)", err, u.Name, u.Role)
		}
		// Made and revoked in a loop, each would still leave its row, its
		// audit and its revocation (kept, and held by every instance, until
		// it would have expired): so many a day, revoked or not.
		var made []time.Time
		since := s.Now().Add(-24 * time.Hour)
		if err := tx.Model(&models.APIToken{}).Where("user_name = ? AND created_at > ?", u.Name, since).Order("created_at").
			Limit(models.MaxAPITokensPerDay).Pluck("created_at", &made).Error; err != nil {
			return err
		}
		if len(made) >= models.MaxAPITokensPerDay {
			after := made[0].Add(24 * time.Hour).Sub(s.Now())
			return &models.RetryAfterError{After: after, Err: fmt.Errorf("%w: user %s made %d API tokens in the last 24 hours, the most a day; the next in %s",
				models.ErrTooManyRequests, u.Name, len(made), models.DurationWords(after))}
		}
		// Each is a credential for up to a year: a person's stay few
		// enough to read and revoke (a session minted them in a loop).
		var live int64
		if err := tx.Model(&models.APIToken{}).Where("user_name = ? AND revoked_at IS NULL AND expires_at > ?", u.Name, s.Now()).
			Count(&live).Error; err != nil {
			return err
		}
		if live >= models.MaxAPITokensPerUser {
			return fmt.Errorf("%w: user %s holds %d API tokens that are neither revoked nor expired, the most one person may; revoke one first",
				models.ErrConflict, u.Name, live)
		}
		t.CreatedAt = s.Now()
		if err := tx.Create(t).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				return fmt.Errorf("%w: API token %s already exists", models.ErrConflict, t.ID)
			}
			return err
		}
		return audit(tx, actor, "create-api-token", "api-token/"+t.ID,
			fmt.Sprintf("%q for %s, role %s, expires %s", t.Name, t.UserName, t.Role, t.ExpiresAt.Format(time.RFC3339)))
	})
}

// APITokens lists API tokens newest first: a user's, or everyone's when
// user is empty; at most limit, those after the token after (a page's
// last id; empty: from the newest). A token is never deleted, so the
// cursor names one; an id that names none is ErrInvalid.
func (s *Store) APITokens(ctx context.Context, user string, limit int, after string) ([]models.APIToken, error) {
	var ts []models.APIToken
	q := s.db.WithContext(ctx).Order("created_at DESC, id").Limit(limit)
	if user != "" {
		q = q.Where("user_name = ?", user)
	}
	if after != "" {
		var n int64
		if err := s.db.WithContext(ctx).Model(&models.APIToken{}).Where("id = ?", after).Count(&n).Error; err != nil {
			return nil, mapErr(err)
		}
		if n == 0 {
			return nil, models.Invalid("cursor", "not a cursor this list gave")
		}
		// The order's key, (created_at, id), past the cursor's own row:
		// read in the statement, so no time is bound in either dialect's
		// text form.
		q = q.Where("(created_at < (SELECT created_at FROM api_tokens WHERE id = ?) OR "+
			"(created_at = (SELECT created_at FROM api_tokens WHERE id = ?) AND id > ?))", after, after, after)
	}
	return ts, mapErr(q.Find(&ts).Error)
}

// APIToken reads one API token by id.
func (s *Store) APIToken(ctx context.Context, id string) (*models.APIToken, error) {
	var t models.APIToken
	if err := s.db.WithContext(ctx).Where("id = ?", id).First(&t).Error; err != nil {
		return nil, fmt.Errorf("API token %s: %w", id, mapErr(err))
	}
	return &t, nil
}

// RevokeAPIToken revokes an API token through the revocations, audited;
// owner, when not empty, must be the token's user (a person revoking their
// own). Revoking twice changes nothing.
func (s *Store) RevokeAPIToken(ctx context.Context, actor, owner, id string) (*models.APIToken, error) {
	return Write(ctx, s, func(tx *Tx) (*models.APIToken, error) {
		var t models.APIToken
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("id = ?", id).First(&t).Error; err != nil || (owner != "" && t.UserName != owner) {
			// Another's token is not found, as one that does not exist.
			return nil, fmt.Errorf("API token %s: %w", id, models.ErrNotFound)
		}
		if t.RevokedAt != nil {
			return &t, nil
		}
		now := s.Now()
		if err := tx.Model(&t).Updates(map[string]any{"revoked_at": now, "revoked_by": actor}).Error; err != nil {
			return nil, err
		}
		t.RevokedAt, t.RevokedBy = &now, actor
		if _, err := revoke(tx, actor, &models.Revocation{TokenID: t.ID, Kind: models.RevokedAPIToken,
			Reason: "API token " + t.Name + " revoked", ExpiresAt: t.ExpiresAt}); err != nil {
			return nil, err
		}
		return &t, audit(tx, actor, "revoke-api-token", "api-token/"+t.ID, fmt.Sprintf("%q of %s", t.Name, t.UserName))
	})
}

// TouchAPITokens records when API tokens were last used, in one
// transaction; a time never moves back.
func (s *Store) TouchAPITokens(ctx context.Context, uses map[string]time.Time) error {
	if len(uses) == 0 {
		return nil
	}
	return s.write(ctx, func(tx *Tx) error {
		for id, at := range uses {
			if err := tx.Model(&models.APIToken{}).Where("id = ? AND (last_used_at IS NULL OR last_used_at < ?)", id, at).
				Update("last_used_at", at).Error; err != nil {
				return err
			}
		}
		return nil
	})
}
