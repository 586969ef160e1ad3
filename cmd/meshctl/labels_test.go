package main

import (
	"slices"
	"strings"
	"testing"

	"mesh/client"
	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_LabelsSelectorsTokensUsers drives labels, a selector, API
// tokens and users through meshctl only, as a script would (-o json).
func TestMeshctl_LabelsSelectorsTokensUsers(t *testing.T) {
	mc := buildMeshctl(t)
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("ops", "admin")
	e.AddUser("carol", "operator")
	for _, m := range []string{"m1", "m2"} {
		e.Enroll(m)
	}
	if r := mc.run("password-of-ops\n", "login", e.URL, "--user", "ops", "--password-stdin"); r.code != 0 {
		t.Fatalf("login: %s", r)
	}
	mc.ok(nil, "modules", "create", "web")

	t.Run("EmptyListIsAList", func(t *testing.T) {
		// A script's jq '.items[]' fails on null: an empty list is [].
		r := mc.run("", "machines", "ls", "--state", "unhealthy", "-o", "json")
		if r.code != 0 || !strings.Contains(strings.ReplaceAll(r.stdout, " ", ""), `"items":[]`) {
			t.Fatalf("no unhealthy machine, -o json: %s", r)
		}
	})

	t.Run("LabelAndSelector", func(t *testing.T) {
		var lu client.LabelsUpdate
		mc.ok(&lu, "machines", "label", "m1", "role=web", "zone=a", "-o", "json")
		if lu.DryRun || lu.Labels["role"] != "web" {
			t.Fatalf("label: %+v", lu)
		}
		var mu client.ModuleUpdate
		mc.ok(&mu, "modules", "update", "web", "--selector", "role=web,zone!=b", "--dry-run", "-o", "json")
		if !mu.DryRun || len(mu.Changes) != 1 || mu.Changes[0].Machine != "m1" || !slices.Equal(mu.Changes[0].Gains, []string{"web"}) {
			t.Fatalf("dry run: %+v", mu)
		}
		var m client.Module
		mc.ok(nil, "modules", "update", "web", "--selector", "role=web,zone!=b")
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules/web", Token: e.Admin}, 200, &m)
		if m.Selector != "role=web,zone!=b" {
			t.Fatalf("selector %q", m.Selector)
		}
		// m2 labelled role=web gains web; the table says so.
		r := mc.ok(nil, "machines", "label", "m2", "role=web")
		if !strings.Contains(r.stdout, "m2") || !strings.Contains(r.stdout, "web") {
			t.Fatalf("label table: %s", r)
		}
		mc.ok(&lu, "machines", "label", "m2", "zone=b", "--dry-run", "-o", "json")
		if !lu.DryRun || len(lu.Changes) != 1 || !slices.Equal(lu.Changes[0].Loses, []string{"web"}) {
			t.Fatalf("dry run of zone=b: %+v", lu)
		}
		// The settings it set are echoed as stored, not only the selector.
		r = mc.ok(nil, "modules", "update", "web", "--tiers", `[{"machines":1},{"percent":50},{"percent":100}]`, "--tier-deadline", "15m", "--on-failure", "rollback")
		for _, want := range []string{"tiers: 1 machine, 50%, 100%\n", "tier deadline: 15m0s\n", "on failure: rollback\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("modules update does not echo %q: %s", want, r)
			}
		}
		if r := mc.run("", "modules", "update", "web", "--selector", "role="); r.code != 1 || !strings.Contains(r.stderr, "no value after =") {
			t.Fatalf("bad selector: %s", r)
		}
		if r := mc.run("", "modules", "delete", "web"); r.code != 1 || !strings.Contains(r.stderr, "m1") {
			t.Fatalf("delete of a selected module: %s", r)
		}
		// Unassigning what a selector gives says where it comes from.
		if r := mc.run("", "unassign", "m1", "web"); r.code != 1 || !strings.Contains(r.stderr, "m1 is not assigned web, its selector gives it: change the machine's labels") {
			t.Fatalf("unassign of a selected module: %s", r)
		}
	})

	t.Run("APITokens", func(t *testing.T) {
		var made client.APITokenCreated
		mc.ok(&made, "tokens", "create", "--api", "ci-main", "--role", "viewer", "-o", "json")
		if made.Token == "" || made.Role != "viewer" {
			t.Fatalf("made %+v", made)
		}
		ci := *mc
		ci.env = append(slices.Clone(mc.env), "MESH_TOKEN="+made.Token, "MESH_CONTROLLER="+e.URL)
		ci.ok(nil, "machines", "ls")
		if r := ci.run("", "machines", "label", "m1", "x=y"); r.code != 1 || !strings.Contains(r.stderr, "Not allowed") {
			t.Fatalf("a viewer's token labelled: %s", r)
		}
		var ls struct {
			APITokens  []client.APIToken      `json:"api_tokens"`
			JoinTokens []client.JoinTokenInfo `json:"join_tokens"`
		}
		mc.ok(&ls, "tokens", "ls", "-o", "json")
		if len(ls.APITokens) != 1 || ls.APITokens[0].Id != made.Id || len(ls.JoinTokens) < 2 {
			t.Fatalf("ls: %+v", ls)
		}
		mc.ok(nil, "tokens", "revoke", made.Id)
		if r := ci.run("", "machines", "ls"); r.code != 1 || !strings.Contains(r.stderr, "revoked") {
			t.Fatalf("a revoked token: %s", r)
		}
	})

	t.Run("Users", func(t *testing.T) {
		var u client.User
		mc.ok(&u, "users", "disable", "carol", "-o", "json")
		if u.Disabled == nil || !*u.Disabled {
			t.Fatalf("disabled: %+v", u)
		}
		var us struct{ Items []client.User }
		mc.ok(&us, "users", "ls", "-o", "json")
		if len(us.Items) != 3 {
			t.Fatalf("users: %+v", us)
		}
		if r := mc.run("", "users", "disable", "ops"); r.code != 1 || !strings.Contains(r.stderr, "yourself") {
			t.Fatalf("disabling oneself: %s", r)
		}
		mc.ok(nil, "users", "update", "carol", "--role", "viewer", "--disabled=false")
	})
}

func TestParseLabelArgs(t *testing.T) {
	m, err := parseLabelArgs([]string{"role=web", "zone-"}, true)
	if err != nil || m["role"] != "web" || m["zone"] != "" || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"role", "=web", "role="} {
		if _, err := parseLabelArgs([]string{bad}, true); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := parseLabelArgs([]string{"zone-"}, false); err == nil {
		t.Error("a removal accepted for a join token")
	}
}
