package service_test

import (
	"context"
	"errors"
	"testing"

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
