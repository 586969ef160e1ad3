package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestAPITokens_ATokenMadeAfterADemotionHasNoOldRole: a person's request
// for an API token was judged by their session's role (admin), and a
// demotion to viewer committed before the token was stored. The token was
// stored with role admin, after the demotion's revocation had been sized
// from the tokens then stored: it worked again, as an admin's, once that
// revocation ended. The store judges the role as it is under the row's
// lock.
func TestAPITokens_ATokenMadeAfterADemotionHasNoOldRole(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for _, n := range []string{"root", "mallory"} {
			if err := s.CreateUser(ctx, "test", &models.User{Name: n, Role: models.RoleAdmin, PasswordHash: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		viewer := models.RoleViewer
		if _, err := s.ChangeUser(ctx, "user:root", "mallory", store.UserChange{Role: &viewer, SessionTTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		tok := &models.APIToken{ID: "at-late", Name: "late", UserName: "mallory", Role: models.RoleAdmin, TokenHash: "h", ExpiresAt: time.Now().Add(365 * 24 * time.Hour)}
		err := s.CreateAPIToken(ctx, "user:mallory", tok)
		if !errors.Is(err, models.ErrForbidden) {
			t.Fatalf("an admin's token stored for mallory, a viewer since: %v", err)
		}
		// One of the role she has is made as ever.
		tok.Role = models.RoleViewer
		if err := s.CreateAPIToken(ctx, "user:mallory", tok); err != nil {
			t.Fatal(err)
		}
	})
}
