package auth

import (
	"sync"
	"time"

	"mesh/models"
)

// Revocations are the token ids this instance refuses: loaded from the
// store at start, told of every revocation by the store (in process and,
// on PostgreSQL, by notification from the other instances), so a logout
// takes effect on every replica at once. Checked in memory on every
// request; an id is forgotten once its token would have expired anyway.
type Revocations struct {
	Now func() time.Time

	mu  sync.RWMutex
	ids map[string]time.Time // id → when its token expires
	// users are the RevokedUser revocations: a user's tokens issued at or
	// before the newest time are refused.
	users map[string]time.Time
}

// NewRevocations is an empty set.
func NewRevocations() *Revocations {
	return &Revocations{Now: time.Now, ids: map[string]time.Time{}}
}

// Add refuses the ids from now on.
func (r *Revocations) Add(rs []models.Revocation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Now()
	for id, exp := range r.ids {
		if !exp.After(now) {
			delete(r.ids, id)
		}
	}
	for _, x := range rs {
		r.ids[x.TokenID] = x.ExpiresAt
	}
	r.users = map[string]time.Time{}
	for id := range r.ids {
		if user, at, ok := models.ParseUserRevocationID(id); ok && at.After(r.users[user]) {
			r.users[user] = at
		}
	}
}

// RevokedUser reports whether a token of user issued at issued is refused
// (the user was disabled, or their role changed, at or after it).
func (r *Revocations) RevokedUser(user string, issued time.Time) bool {
	if r == nil {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	at, ok := r.users[user]
	return ok && !issued.After(at)
}

// Revoked reports whether id is refused.
func (r *Revocations) Revoked(id string) bool {
	if r == nil || id == "" {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.ids[id]
	return ok
}
