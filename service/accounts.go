package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"mesh/auth"
	"mesh/models"
)

// Login checks a person's name and password and issues their token. A
// failure is audited with the address it came from; both ways in (the API
// and the dashboard) answer through here.
func (s *Service) Login(ctx context.Context, user, password, addr string) (string, time.Time, error) {
	// No account has a longer name: what is audited and throttled of one
	// is its start (a megabyte name a failed attempt was a megabyte row).
	user = models.EscapeLogLine(user, maxLoginName)
	wait, done := s.Throttle.Attempt(user, addr)
	if wait > 0 {
		// One row a minute for a name and address: each attempt refused
		// while throttled is not a write of its own. An address over its
		// own limit is one row a minute whatever names it gives: its
		// refusals cost no password check, so they come as fast as it
		// sends them, and a new name each time was a row each time.
		key := user + "\x00" + addr
		if s.Throttle.AddressThrottled(addr) {
			key = "address\x00" + addr
		}
		_ = s.refusals.Record(ctx, s.Store.Audit, key, auth.Row{Actor: "anonymous", Action: "login-throttled", Target: "user/" + user}, addr)
		return "", time.Time{}, &models.RetryAfterError{After: wait,
			Err: fmt.Errorf("%w: too many failed logins; try again in %s", models.ErrTooManyRequests, wait.Round(time.Second))}
	}
	// Ended on every way out, a panic's too: a failure unless the
	// password was right. The store not saying counts as a failure: an
	// outage is no time to guess more freely.
	ok := false
	defer func() { done(ok) }()
	// The token is issued as of now, before the user is read: a disable
	// or a new password committed during the password check is at or
	// after this time, so its revocation refuses the token.
	issued := s.Auth.Now()
	u, err := s.Store.User(ctx, user)
	if err != nil && !errors.Is(err, models.ErrNotFound) {
		// Not "wrong password": the store could not say.
		return "", time.Time{}, &models.RetryAfterError{After: 5 * time.Second, Err: fmt.Errorf("%w: %v", models.ErrUnavailable, err)}
	}
	if u != nil {
		ok = auth.CheckPassword(u.PasswordHash, password)
	} else {
		auth.CheckNoUser(password) // an unknown user costs what a known one does
	}
	if !ok {
		_ = s.Store.Audit(ctx, "anonymous", "login-failed", "user/"+user, addr)
		return "", time.Time{}, fmt.Errorf("%w: wrong user name or password", models.ErrUnauthorized)
	}
	if u.DisabledAt != nil {
		_ = s.Store.Audit(ctx, "anonymous", "login-refused", "user/"+user, "disabled; from "+addr)
		return "", time.Time{}, fmt.Errorf("%w: user %s is disabled", models.ErrForbidden, user)
	}
	return s.Auth.IssuePerson(u.Name, u.Role, issued)
}

// Logout revokes a person's token until it would have expired, on every
// instance; the token no longer works as a session or as an API bearer.
func (s *Service) Logout(ctx context.Context, actor, tokenID string, expires time.Time) error {
	if tokenID == "" {
		return nil // a token of an older build: it expires on its own
	}
	return s.Store.Revoke(ctx, actor, &models.Revocation{TokenID: tokenID, Kind: models.RevokedSession, Reason: "logged out", ExpiresAt: expires})
}

// maxLoginName is more than any user name (models.ValidName: 63): a
// longer one is cut there, marked with "…", still no account's name.
const maxLoginName = 64

// ChangePassword sets a person's own password, given the current one: a
// wrong current password counts as a failed login (throttled and audited
// alike, so this is no way around the login's throttle). Every session
// and API token of theirs is revoked, this one too: they log in again.
func (s *Service) ChangePassword(ctx context.Context, user, current, next, addr string) error {
	wait, done := s.Throttle.Attempt(user, addr)
	if wait > 0 {
		// One row a minute, as a throttled login: a refused attempt costs
		// no password check, so a flood of them was thousands of rows a
		// second.
		_ = s.refusals.Record(ctx, s.Store.Audit, "password\x00"+user+"\x00"+addr,
			auth.Row{Actor: "user:" + user, Action: "password-change-throttled", Target: "user/" + user}, addr)
		return &models.RetryAfterError{After: wait,
			Err: fmt.Errorf("%w: too many failed attempts; try again in %s", models.ErrTooManyRequests, wait.Round(time.Second))}
	}
	ok := false
	defer func() { done(ok) }()
	u, err := s.Store.User(ctx, user)
	if err != nil {
		return err
	}
	if ok = auth.CheckPassword(u.PasswordHash, current); !ok {
		_ = s.Store.Audit(ctx, "user:"+user, "password-change-refused", "user/"+user, "wrong current password; from "+addr)
		return fmt.Errorf("%w: the current password is wrong", models.ErrForbidden)
	}
	hash, err := auth.HashPassword(next)
	if err != nil {
		return err
	}
	return s.Store.SetPassword(ctx, "user:"+user, user, u.PasswordHash, hash, auth.PersonTokenTTL)
}
