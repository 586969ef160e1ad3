package api_test

import (
	"os"
	"testing"

	"mesh/controller/ctltest"
)

func TestSources_Delete(t *testing.T) {
	body, err := os.ReadFile("testdata/github-push.json")
	if err != nil {
		t.Fatal(err)
	}
	each(t, func(t *testing.T, e *ctltest.Env) {
		source := map[string]any{"name": "gh", "kind": "github", "repository": "octo-org/fleet", "default_branch": "main", "secret": hookSecret}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin, Body: source}, 201, nil)
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
			Body: map[string]any{"name": "node-tools", "repository": "octo-org/fleet", "source_paths": []string{"modules/node-tools/"}}}, 201, nil)
		hook := func() int {
			resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/gh", Body: body, Header: map[string]string{
				"X-GitHub-Event": "push", "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-Hub-Signature-256": "sha256=" + sign(body)}})
			return resp.StatusCode
		}
		if st := hook(); st != 200 {
			t.Fatalf("hook: %d", st)
		}
		op := e.AddUser("olga", "operator")

		t.Run("ErrNotAdmin", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/sources/gh", Token: op}, 403, nil)
		})
		t.Run("OK", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/sources/gh", Token: e.Admin}, 204, nil)
			if !hasAudit(audited(e), "delete-source", "source/gh") {
				t.Fatal("delete not audited")
			}
			var l struct{ Items []any }
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/sources", Token: e.Admin}, 200, &l)
			if len(l.Items) != 0 {
				t.Fatalf("sources after delete: %+v", l.Items)
			}
			if st := hook(); st != 404 {
				t.Fatalf("hook of a deleted source: %d, want 404", st)
			}
			// The build its merge queued stays, and a builder still takes it.
			var b struct{ State string }
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules/node-tools/builds/1", Token: e.Admin}, 200, &b)
			if b.State != "queued" {
				t.Fatalf("queued build after delete: %+v", b)
			}
			var claimed struct{ Module string }
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/builds/claim", Token: e.AddUser("ci", "builder")}, 200, &claimed)
			if claimed.Module != "node-tools" {
				t.Fatalf("claimed %+v", claimed)
			}
			// Its deliveries went with it: made again, the same delivery is new.
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin, Body: source}, 201, nil)
			if st := hook(); st != 200 {
				t.Fatalf("hook of the source made again: %d", st)
			}
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/sources/nope", Token: e.Admin}, 404, nil)
		})
	})
}
