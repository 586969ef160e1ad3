package service_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"mesh/auth"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestLogin_StoreDownIsUnavailable: with the store unreachable, login
// used to say 401 "wrong user name or password"; it says the store is
// unavailable (503), and nothing is counted against the person.
func TestLogin_StoreDownIsUnavailable(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		svc := newService(s)
		svc.Throttle = auth.NewThrottle()
		svc.Auth = &auth.Authority{Now: time.Now}
		s.Close()
		_, _, err := svc.Login(context.Background(), "carol", "password-of-carol", "127.0.0.1")
		var ra *models.RetryAfterError
		if !errors.Is(err, models.ErrUnavailable) || !errors.As(err, &ra) {
			t.Fatalf("login with the store down: %v", err)
		}
		if w := svc.Throttle.Wait("carol", "127.0.0.1"); w != 0 {
			t.Fatalf("an outage counted as a failed login: wait %v", w)
		}
	})
}

// TestLogin_DisabledDuringThePasswordCheck: a disable (or a new password)
// that commits while a login checks the password refuses the token that
// login issues. The token was issued as of the end of the check, so a
// revocation committed during it, in an earlier second, let it through.
// The clock here runs a thousand times fast: the check's tens of
// milliseconds are tens of seconds.
func TestLogin_DisabledDuringThePasswordCheck(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		hash, err := auth.HashPassword("password-of-carol")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateUser(ctx, "test", &models.User{Name: "carol", Role: models.RoleOperator, PasswordHash: hash}); err != nil {
			t.Fatal(err)
		}
		_, priv, _ := ed25519.GenerateKey(nil)
		start, base := time.Now(), time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
		fast := func() time.Time { return base.Add(time.Since(start) * 1000) }
		svc := newService(s)
		svc.Throttle = auth.NewThrottle()
		svc.Auth = &auth.Authority{KeyID: "k", Priv: priv, Now: fast, Revoked: auth.NewRevocations()}
		svc.Auth.Revoked.Now = fast
		tok, _, err := svc.Login(ctx, "carol", "password-of-carol", "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		// The disable, committed 5 ms (5 fast seconds) into the login:
		// during its password check.
		disabled := base.Add(5 * time.Second)
		if fast().Before(disabled.Add(2 * time.Second)) {
			t.Fatal("the login took under 7 ms: a password check (bcrypt) takes longer, so the clock here is not what this test assumes")
		}
		svc.Auth.Revoked.Add([]models.Revocation{{TokenID: models.UserRevocationID("carol", disabled), Kind: models.RevokedUser,
			ExpiresAt: base.Add(24 * time.Hour)}})
		if _, err := svc.Auth.ParsePerson(tok); err == nil {
			t.Fatal("a login whose password check a disable fell in got a token that works")
		}
	})
}
