package service_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"mesh/auth"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPassword_AChangeDuringADemotionKeepsTheNewRole: a person's change of
// their own password read their account (role admin), checked the current
// password and hashed the new one (bcrypt, a tenth of a second or more),
// then wrote the role it had read back with the new hash. An admin's
// lowering of that role to viewer, committed meanwhile and answered 200,
// was undone: the next login with the new password was an admin's.
func TestPassword_AChangeDuringADemotionKeepsTheNewRole(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		hash, err := auth.HashPassword("password-of-mallory")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateUser(ctx, "test", &models.User{Name: "mallory", Role: models.RoleAdmin, PasswordHash: hash}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateUser(ctx, "test", &models.User{Name: "admin", Role: models.RoleAdmin, PasswordHash: hash}); err != nil {
			t.Fatal(err)
		}
		svc := newService(s)
		svc.Throttle = auth.NewThrottle()
		svc.Auth = &auth.Authority{Now: time.Now}
		// The demotion commits right after the password change has read
		// the account, while it checks and hashes.
		var armed atomic.Bool
		armed.Store(true)
		name := "test:demote-during-password-change"
		viewer := models.RoleViewer
		if err := s.DB().Callback().Query().After("gorm:query").Register(name, func(db *gorm.DB) {
			if db.Statement.Table != "users" {
				return
			}
			if armed.CompareAndSwap(true, false) {
				if _, err := s.ChangeUser(context.Background(), "user:admin", "mallory", store.UserChange{Role: &viewer, SessionTTL: time.Hour}); err != nil {
					t.Errorf("the demotion: %v", err)
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.DB().Callback().Query().Remove(name) }()
		if err := svc.ChangePassword(ctx, "mallory", "password-of-mallory", "a-new-password-of-mallory", "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		u, err := s.User(ctx, "mallory")
		if err != nil {
			t.Fatal(err)
		}
		if u.Role != models.RoleViewer {
			t.Fatalf("mallory was lowered to viewer while changing her password; she is %s now", u.Role)
		}
		if !auth.CheckPassword(u.PasswordHash, "a-new-password-of-mallory") {
			t.Fatal("the new password was not kept")
		}
	})
}
