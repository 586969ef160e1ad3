package api_test

import (
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestAPITokens_ALesserTokenDoesNotRevokeItsOwnersBuilderToken: a
// builder's token is one only an admin may make (MayGrant: "an admin
// makes builders' tokens"), and an API token now acts with its own role.
// But the revocation rule ranked a builder below a viewer (RoleRank 0): a
// viewer's token an admin made for a wall screen — or an operator's —
// revoked the admin's CI runner token, and every build stopped. A token
// may not revoke a token its role could not have made.
func TestAPITokens_ALesserTokenDoesNotRevokeItsOwnersBuilderToken(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	var ci, screen, ops struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: e.Admin,
		Body: map[string]string{"name": "ci-runner", "role": "builder"}}, 201, &ci)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: e.Admin,
		Body: map[string]string{"name": "screen", "role": "viewer"}}, 201, &screen)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: e.Admin,
		Body: map[string]string{"name": "ops", "role": "operator"}}, 201, &ops)
	// A viewer may not make a builder's token...
	resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: e.AddUser("vera", "viewer"),
		Body: map[string]string{"name": "x", "role": "builder"}})
	if resp.StatusCode != 403 {
		t.Fatalf("a viewer made a builder's token: %d %s", resp.StatusCode, body)
	}
	// ...but the admin's screen token revokes the admin's CI token.
	for _, tok := range []string{screen.Token, ops.Token} {
		resp, body = e.Do(ctltest.Request{Method: "DELETE", Path: "/api/v1/api-tokens/" + ci.ID, Token: tok})
		if resp.StatusCode != 403 {
			t.Fatalf("a lesser API token revoked its owner's CI runner token (a builder's, which only an admin may make): %d %.300s, want 403",
				resp.StatusCode, body)
		}
	}
}
