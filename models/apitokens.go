package models

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// APIToken is a long-lived token of a person or a builder (CI): a JWT the
// controller signs, whose hash alone is kept. Its role is never more than
// its creator's; it expires; it is revoked through the revocations (the
// one mechanism), by its id.
type APIToken struct {
	ID         string `gorm:"primaryKey"`
	Name       string
	UserName   string
	Role       string
	TokenHash  string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
	RevokedBy  string
}

// MaxAPITokensPerUser bounds the API tokens one person holds at once
// (neither revoked nor expired), and MaxAPITokensPerDay those one person
// makes in 24 hours, revoked or not.
const (
	MaxAPITokensPerUser = 50
	MaxAPITokensPerDay  = 100
)

// API token states, as listed.
const (
	APITokenActive  = "active"
	APITokenExpired = "expired"
	APITokenRevoked = "revoked"
)

// State says what the token is at now.
func (t *APIToken) State(now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return APITokenRevoked
	case !now.Before(t.ExpiresAt):
		return APITokenExpired
	}
	return APITokenActive
}

// MayGrant says whether a person of role creator may make a token of role:
// never more than their own. An admin may make any (a builder's token for
// CI among them); a builder only a builder's; others a role at or under
// theirs, never builder.
func MayGrant(creator, role string) error {
	switch {
	case !ValidRole(role):
		return Invalid("role", "one of viewer, operator, admin, builder")
	case creator == RoleAdmin, creator == role:
		return nil
	case role == RoleBuilder || creator == RoleBuilder:
		return fmt.Errorf("%w: a %s may not make a %s's token (an admin makes builders' tokens)", ErrForbidden, creator, role)
	case RoleRank(role) > RoleRank(creator):
		return fmt.Errorf("%w: a %s may not make a token of role %s, which is more than their own", ErrForbidden, creator, role)
	}
	return nil
}

// userRevocationPrefix starts the id of a RevokedUser revocation.
const userRevocationPrefix = "user:"

// UserRevocationID is the revocation id that refuses every token of user
// issued at or before at (a disable, a role change, a new password):
// "user:NAME@UNIX". Whole seconds, as tokens' iat is: a token issued in
// the revocation's second is refused with it, even one issued just after
// (a login the same second a user is enabled again), which errs on the
// side of refusing; and every release reads this form, so replicas of
// two builds refuse the same tokens. Each such act has its own id, so a
// user enabled again and disabled later is revoked again.
func UserRevocationID(user string, at time.Time) string {
	return userRevocationPrefix + user + "@" + strconv.FormatInt(at.Unix(), 10)
}

// ParseUserRevocationID reads UserRevocationID; ok is false for other ids.
func ParseUserRevocationID(id string) (user string, at time.Time, ok bool) {
	rest, ok := strings.CutPrefix(id, userRevocationPrefix)
	if !ok {
		return "", time.Time{}, false
	}
	i := strings.LastIndexByte(rest, '@')
	if i <= 0 {
		return "", time.Time{}, false
	}
	sec, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return rest[:i], time.Unix(sec, 0).UTC(), true
}
