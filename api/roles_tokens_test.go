package api_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestUsers_NotYourOwnRole: an admin may not change their own account's
// role (DESIGN, PATCH /api/v1/users/{name}: "not yourself"); only
// disabling oneself was refused, and an admin's own role change was taken.
func TestUsers_NotYourOwnRole(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("second", "admin") // not the last admin
	resp, body := e.Do(ctltest.Request{Method: "PATCH", Path: "/api/v1/users/admin", Token: e.Admin,
		Body: map[string]any{"role": "operator"}})
	if resp.StatusCode != 409 {
		t.Fatalf("an admin changing their own role: %d %s, want 409", resp.StatusCode, body)
	}
}

// TestAPITokens_ATokenActsWithItsOwnRole: a builder's token is a CI
// runner's: claim queued builds, upload their artifacts, nothing else.
// An admin made one for CI (under the admin's own name, as only an admin
// may), and the runner's token listed the admin's API tokens, revoked the
// admin's token for deploys, and guessed at the admin's password; a
// viewer's token made for a screen revoked it too.
func TestAPITokens_ATokenActsWithItsOwnRole(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	var ci, screen, deploy struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: e.Admin,
		Body: map[string]string{"name": "ci-runner", "role": "builder"}}, 201, &ci)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: e.Admin,
		Body: map[string]string{"name": "screen", "role": "viewer"}}, 201, &screen)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: e.Admin,
		Body: map[string]string{"name": "deploy", "role": "admin"}}, 201, &deploy)

	resp, body := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/api-tokens", Token: ci.Token})
	if resp.StatusCode != 403 {
		t.Errorf("a builder's token lists API tokens: %d %.300s, want 403", resp.StatusCode, body)
	}
	for _, tok := range []string{ci.Token, screen.Token} {
		resp, body = e.Do(ctltest.Request{Method: "DELETE", Path: "/api/v1/api-tokens/" + deploy.ID, Token: tok})
		if resp.StatusCode != 403 {
			t.Errorf("a lesser token revokes its owner's admin token %s: %d %.300s, want 403", deploy.ID, resp.StatusCode, body)
		}
		resp, body = e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/password", Token: tok,
			Body: map[string]string{"current_password": "a-guess-at-the-admins", "new_password": "another-password-1"}})
		if resp.StatusCode != 403 || !strings.Contains(string(body), "API token") {
			t.Errorf("an API token tries its owner's password: %d %.300s, want 403", resp.StatusCode, body)
		}
	}
	resp, _ = e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: deploy.Token})
	if resp.StatusCode != 200 {
		t.Errorf("the admin's deploy token, after lesser tokens were used on it: %d", resp.StatusCode)
	}
	// The viewer's token may still list, and revoke a token of its own rank.
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/api-tokens", Token: screen.Token}, 200, nil)
	e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/api-tokens/" + screen.ID, Token: screen.Token}, 200, nil)
}
