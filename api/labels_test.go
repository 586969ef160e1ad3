package api_test

import (
	"slices"
	"testing"

	"mesh/controller/ctltest"
)

type selectionChange struct {
	Machine string
	Gains   []string
	Loses   []string
}

type changesAnswer struct {
	Changes []selectionChange
	DryRun  bool `json:"dry_run"`
}

func TestLabels_DryRunChangesNothing(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
		e.Enroll("m1")
		e.Enroll("m2")
		op := e.AddUser("olga", "operator")
		etag := func(path string) string {
			return e.JSON(ctltest.Request{Method: "GET", Path: path, Token: op}, 200, nil).Header.Get("ETag")
		}
		for _, m := range []string{"m1", "m2"} {
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + m + "/labels", Token: op,
				Header: map[string]string{"If-Match": etag("/api/v1/machines/" + m)},
				Body:   map[string]any{"labels": map[string]string{"role": map[string]string{"m1": "web", "m2": "db"}[m]}}}, 200, nil)
		}

		t.Run("Selector", func(t *testing.T) {
			before, mgen := etag("/api/v1/modules/web"), etag("/api/v1/machines/m1")
			var a changesAnswer
			e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/web?dry_run=true", Token: op,
				Header: map[string]string{"If-Match": before}, Body: map[string]any{"selector": "role=web"}}, 200, &a)
			if !a.DryRun || len(a.Changes) != 1 || a.Changes[0].Machine != "m1" || !slices.Equal(a.Changes[0].Gains, []string{"web"}) {
				t.Fatalf("preview: %+v", a)
			}
			if etag("/api/v1/modules/web") != before || etag("/api/v1/machines/m1") != mgen {
				t.Fatal("a dry run changed the module or the machine")
			}
			e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/web", Token: op,
				Header: map[string]string{"If-Match": before}, Body: map[string]any{"selector": "role=web"}}, 200, &a)
			if a.DryRun || len(a.Changes) != 1 || etag("/api/v1/machines/m1") == mgen {
				t.Fatalf("applied: %+v", a)
			}
			var m struct {
				GenerationTrigger string `json:"generation_trigger"`
			}
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: op}, 200, &m)
			if m.GenerationTrigger != "label" {
				t.Fatalf("trigger %q", m.GenerationTrigger)
			}
			// The old ETag is stale now; a missing one is required.
			e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/web", Token: op,
				Header: map[string]string{"If-Match": before}, Body: map[string]any{"selector": ""}}, 412, nil)
			e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/web", Token: op, Body: map[string]any{"selector": ""}}, 428, nil)
			e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/web", Token: op,
				Header: map[string]string{"If-Match": etag("/api/v1/modules/web")}, Body: map[string]any{"selector": "role=,zone"}}, 400, nil)
		})
		t.Run("Labels", func(t *testing.T) {
			gen := etag("/api/v1/machines/m2")
			var a changesAnswer
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m2/labels?dry_run=true", Token: op,
				Header: map[string]string{"If-Match": gen}, Body: map[string]any{"labels": map[string]string{"role": "web"}}}, 200, &a)
			if !a.DryRun || len(a.Changes) != 1 || !slices.Equal(a.Changes[0].Gains, []string{"web"}) {
				t.Fatalf("preview: %+v", a)
			}
			var ls struct{ Labels map[string]string }
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m2/labels", Token: op}, 200, &ls)
			if ls.Labels["role"] != "db" || etag("/api/v1/machines/m2") != gen {
				t.Fatalf("a dry run changed m2: %v", ls.Labels)
			}
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m2/labels", Token: op,
				Header: map[string]string{"If-Match": gen}, Body: map[string]any{"labels": map[string]string{"Role": "web"}}}, 400, nil)
		})
		t.Run("DeleteSelectedModule", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/modules/web", Token: e.Admin}, 409, nil)
		})
	})
}

func TestAPITokens_UseRevokeAndDisable(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.AddUser("ci", "operator")
		ci := e.Login("ci", "password-of-ci")
		var made struct {
			ID, Token, Role string
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: ci,
			Body: map[string]any{"name": "main", "role": "admin"}}, 403, nil)
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: ci,
			Body: map[string]any{"name": "main", "expires_in": "720h"}}, 201, &made)
		if made.Role != "operator" || made.Token == "" {
			t.Fatalf("made %+v", made)
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: made.Token, Body: map[string]any{"name": "app"}}, 201, nil)
		// The audit log tells the token from its owner's own hand.
		for _, ev := range audited(e) {
			if ev.Target == "module/app" && ev.Actor != "user:ci (API token "+made.ID+")" {
				t.Fatalf("a module made with ci's API token is audited as %q", ev.Actor)
			}
		}
		// An API token makes no successor that would outlive its revocation.
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: made.Token,
			Body: map[string]any{"name": "successor", "expires_in": "8760h"}}, 403, nil)

		var list struct {
			Items []struct{ ID, State string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/api-tokens", Token: ci}, 200, &list)
		if len(list.Items) != 1 || list.Items[0].ID != made.ID || list.Items[0].State != "active" {
			t.Fatalf("listed %+v", list)
		}
		e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/api-tokens/" + made.ID, Token: ci}, 200, nil)
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules", Token: made.Token}, 401, nil)

		// A disabled user's session ends, and they cannot log in.
		e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/users/ci", Token: e.Admin, Body: map[string]any{"disabled": true}}, 200, nil)
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules", Token: ci}, 401, nil)
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login", Body: map[string]string{"username": "ci", "password": "password-of-ci"}}, 403, nil)
		if !hasAudit(audited(e), "update-user", "user/ci") {
			t.Fatal("the disable was not audited")
		}
		// Enabled again, they log in afresh.
		e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/users/ci", Token: e.Admin, Body: map[string]any{"disabled": false}}, 200, nil)
		e.Login("ci", "password-of-ci")
		e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/users/admin", Token: e.Admin, Body: map[string]any{"disabled": true}}, 409, nil)
	})
}

// TestAssignments_ShowWhatSelectorsGive: GET …/assignments lists what a
// person assigned, and beside it what selectors give the machine (with a
// plan rollback's pin, when one was made on it): "Assigned: none" read as
// nothing given. A PUT of the assignments leaves the selected as they are.
func TestAssignments_ShowWhatSelectorsGive(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
		e.Enroll("m1")
		etag := func(path string) string {
			return e.JSON(ctltest.Request{Method: "GET", Path: path, Token: e.Admin}, 200, nil).Header.Get("ETag")
		}
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/labels", Token: e.Admin,
			Header: map[string]string{"If-Match": etag("/api/v1/machines/m1")}, Body: map[string]any{"labels": map[string]string{"role": "web"}}}, 200, nil)
		e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/web", Token: e.Admin,
			Header: map[string]string{"If-Match": etag("/api/v1/modules/web")}, Body: map[string]any{"selector": "role=web"}}, 200, nil)
		var as struct {
			Assignments []struct{ Module string }
			Selected    []struct {
				Module string
				Build  *int
			}
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
		if len(as.Assignments) != 0 || len(as.Selected) != 1 || as.Selected[0].Module != "web" {
			t.Fatalf("assignments: %+v", as)
		}
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": etag("/api/v1/machines/m1")}, Body: map[string]any{"assignments": []any{}}}, 200, nil)
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
		if len(as.Selected) != 1 || as.Selected[0].Module != "web" {
			t.Fatalf("after a PUT of none: %+v", as)
		}
	})
}
