package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_MachinesDeleteSaysJSON: the root --help promises "the API's
// JSON with -o json" for every command; machines delete -o json printed
// the words "m1: deleted", which a script's jq cannot read.
func TestMeshctl_MachinesDeleteSaysJSON(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1")
	meshctl := asAdmin(t, e)
	out, errOut, code := meshctl("machines", "delete", "m1", "-o", "json")
	if code != 0 {
		t.Fatalf("machines delete m1 -o json: exit %d\n%s%s", code, out, errOut)
	}
	if !json.Valid([]byte(out)) {
		t.Errorf("machines delete m1 -o json: stdout is not JSON:\n%s", out)
	}
}

// TestMeshctl_PasswdSaysJSON: users passwd -o json printed prose too.
func TestMeshctl_PasswdSaysJSON(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	tok := e.AddUser("carol", "operator")
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("MESH_CONTROLLER", e.URL)
	t.Setenv("MESH_TOKEN", tok)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"users", "passwd", "--password-stdin", "-o", "json"},
		strings.NewReader("password-of-carol\nan-entirely-new-password\n"), &out, &errOut)
	if code != 0 {
		t.Fatalf("users passwd -o json: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !json.Valid(out.Bytes()) {
		t.Errorf("users passwd -o json: stdout is not JSON:\n%s", out.String())
	}
}

// TestMeshctl_TokensLsSaysWhenRevoked: a revoked API token's row said
// "revoked" with neither when nor by whom, though the API gives revoked_at
// and revoked_by (the other columns' times are its expiry and last use).
func TestMeshctl_TokensLsSaysWhenRevoked(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	meshctl := asAdmin(t, e)
	out, errOut, code := meshctl("tokens", "create", "--api", "ci", "-o", "json")
	if code != 0 {
		t.Fatalf("tokens create: exit %d\n%s%s", code, out, errOut)
	}
	var tok struct{ Id string }
	if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.Id == "" {
		t.Fatalf("tokens create: %q (%v)", out, err)
	}
	if out, errOut, code := meshctl("tokens", "revoke", tok.Id); code != 0 {
		t.Fatalf("tokens revoke: exit %d\n%s%s", code, out, errOut)
	}
	var ls struct {
		APITokens []struct {
			Id        string  `json:"id"`
			State     string  `json:"state"`
			RevokedAt *string `json:"revoked_at"`
		} `json:"api_tokens"`
	}
	out, _, _ = meshctl("tokens", "ls", "--api", "-o", "json")
	if err := json.Unmarshal([]byte(out), &ls); err != nil || len(ls.APITokens) != 1 || ls.APITokens[0].RevokedAt == nil {
		t.Fatalf("tokens ls -o json: %s (%v)", out, err)
	}
	out, _, _ = meshctl("tokens", "ls", "--api")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, tok.Id) && !strings.Contains(l, "s ago") {
			t.Errorf("tokens ls: the revoked token's row says no time of its revocation (the API: revoked_at %s):\n%s", *ls.APITokens[0].RevokedAt, out)
		}
	}
}
