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
	u, err := s.Store.User(ctx, user)
	if err != nil && !errors.Is(err, models.ErrNotFound) {
		return "", time.Time{}, err
	}
	if err != nil || !auth.CheckPassword(u.PasswordHash, password) {
		_ = s.Store.Audit(ctx, "anonymous", "login-failed", "user/"+user, addr)
		return "", time.Time{}, fmt.Errorf("%w: wrong user name or password", models.ErrUnauthorized)
	}
	return s.Auth.IssuePerson(u.Name, u.Role)
}
