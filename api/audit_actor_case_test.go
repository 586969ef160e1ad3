package api_test

import (
	"testing"

	"mesh/controller/ctltest"
)

// The audit's actor filter is exact (DESIGN: "one thing's events by exact
// target, action or actor"), and the same on both stores: an actor given
// in another case matches none of alice's events, on SQLite as on PostgreSQL.
func TestAudit_ActorFilterIsExactOnEveryStore(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		var tok struct{ Token string }
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: e.Admin, Body: map[string]any{"name": "ci"}}, 201, &tok)
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: tok.Token, Body: map[string]any{"name": "web"}}, 201, nil)

		var exact, upper struct {
			Items []struct{ Actor, Action string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?actor=user:admin", Token: e.Admin}, 200, &exact)
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?actor=USER:ADMIN", Token: e.Admin}, 200, &upper)
		t.Logf("actor=user:admin: %d events; actor=USER:ADMIN: %+v", len(exact.Items), upper.Items)
		if len(upper.Items) != 0 {
			t.Errorf("?actor=USER:ADMIN matched %d events (%+v): the filter is not exact, and the stores answer it apart", len(upper.Items), upper.Items)
		}
	})
}
