package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm/clause"

	"mesh/models"
)

// revokedPrefix marks a notification of a revocation on the channel that
// carries bumps ("revoked:<id>:<unix expiry>"); an instance of an older
// build reads no bump in it and ignores it.
const revokedPrefix = "revoked:"

// Revoke refuses a token id until it would have expired: the one
// revocation mechanism (a logout, later API tokens and certificates).
// Every instance hears of it at once (in process, and by NOTIFY).
func (s *Store) Revoke(ctx context.Context, actor string, r *models.Revocation) error {
	return s.write(ctx, func(tx *Tx) error {
		added, err := revoke(tx, actor, r)
		if err != nil || !added {
			return err
		}
		return audit(tx, actor, "revoke", r.Kind+"/"+r.TokenID[:min(8, len(r.TokenID))], r.Reason)
	})
}

// revoke is Revoke inside a transaction, without its audit line (the
// caller's act says what was revoked); added is false when the id was
// revoked already (nothing changes then).
func revoke(tx *Tx, actor string, r *models.Revocation) (added bool, err error) {
	s := tx.s
	r.RevokedBy, r.RevokedAt = actor, s.Now()
	// Kept past the token's expiry by the leeway a token is accepted
	// with (and a notification's expiry, in whole seconds, rounds within it).
	r.ExpiresAt = r.ExpiresAt.Add(models.TokenLeeway)
	res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(r)
	if res.Error != nil || res.RowsAffected == 0 {
		return false, res.Error
	}
	if s.dialect == Postgres {
		payload := fmt.Sprintf("%s%s:%d", revokedPrefix, r.TokenID, r.ExpiresAt.Unix())
		if err := tx.Exec("SELECT pg_notify(?, ?)", s.channel, payload).Error; err != nil {
			return false, err
		}
	}
	tx.revoked = append(tx.revoked, *r)
	return true, nil
}

// Revocations are the token ids refused now (not yet expired).
func (s *Store) Revocations(ctx context.Context) ([]models.Revocation, error) {
	var rs []models.Revocation
	return rs, mapErr(s.db.WithContext(ctx).Where("expires_at > ?", s.Now()).Find(&rs).Error)
}

// AnnounceRevocations reads the revocations in force and tells OnRevoked's
// hooks of those known says this instance has not heard of, as if each
// were just made: what an instance that may have missed a notification
// (its listener was away) or a revocation made beside it (a short command
// on SQLite) does, so that its refused set and its parked polls catch up.
func (s *Store) AnnounceRevocations(ctx context.Context, known func(tokenID string) bool) error {
	rs, err := s.Revocations(ctx)
	if err != nil {
		return err
	}
	missed := rs[:0]
	for _, r := range rs {
		if !known(r.TokenID) {
			missed = append(missed, r)
		}
	}
	s.announceRevoked(missed)
	return nil
}

// OnRevoked registers f to be called, after commit, with every revocation
// a committed transaction made, and with those other instances made (by
// notification, PostgreSQL).
func (s *Store) OnRevoked(f func([]models.Revocation)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRevoked = append(s.onRevoked, f)
}

func (s *Store) announceRevoked(rs []models.Revocation) {
	if len(rs) == 0 {
		return
	}
	s.mu.RLock()
	fs := s.onRevoked
	s.mu.RUnlock()
	for _, f := range fs {
		f(rs)
	}
}

// parseRevoked reads a revocation notification; ok is false for others.
func parseRevoked(payload string) (models.Revocation, bool) {
	rest, ok := strings.CutPrefix(payload, revokedPrefix)
	if !ok {
		return models.Revocation{}, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return models.Revocation{}, false
	}
	exp, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return models.Revocation{}, false
	}
	return models.Revocation{TokenID: rest[:i], ExpiresAt: time.Unix(exp, 0).UTC()}, true
}

// PruneRevocations forgets revocations of tokens that have expired.
func (s *Store) PruneRevocations(ctx context.Context) error {
	return s.write(ctx, func(tx *Tx) error {
		return tx.Where("expires_at <= ?", s.Now()).Delete(&models.Revocation{}).Error
	})
}
