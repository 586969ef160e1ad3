package api_test

import (
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// TestUserDisable_AnAPITokenFromAReplicaWhoseClockIsAheadIsRefused: two
// instances on one PostgreSQL, b's clock two minutes ahead of a's. carol
// made an admin API token through b; then an admin disabled her through
// a. The disable's revocation was "tokens issued at or before a's now",
// and b had stamped the token with its own now, in a's future: the token
// worked on both instances for its whole lifetime while the list said it
// was revoked. Each of her API tokens is revoked by its id as well.
func TestUserDisable_AnAPITokenFromAReplicaWhoseClockIsAheadIsRefused(t *testing.T) {
	cfg := storetest.Config(t, store.Postgres)
	a := ctltest.StartWith(t, cfg)
	b := ctltest.StartWith(t, cfg)
	ahead := func() time.Time { return time.Now().Add(2 * time.Minute) }
	b.Ctl.Server.Auth.Now = ahead
	b.Ctl.Store.Now = ahead

	a.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/users", Token: a.Admin,
		Body: map[string]string{"name": "carol", "role": "admin", "password": "password-of-carol"}}, 201, nil)
	tok := b.Login("carol", "password-of-carol")
	var made struct{ Token string }
	b.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: tok,
		Body: map[string]string{"name": "ci", "role": "admin"}}, 201, &made)
	b.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: made.Token}, 200, nil)

	a.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/users/carol", Token: a.Admin,
		Body: map[string]any{"disabled": true}}, 200, nil)
	for name, e := range map[string]*ctltest.Env{"a": a, "b": b} {
		testwait.For(t, 5*time.Second, "carol's API token refused on instance "+name, func() bool {
			resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/users", Token: made.Token})
			return resp.StatusCode == 401
		})
	}
}
