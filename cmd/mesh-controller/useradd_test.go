package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"mesh/controller"
	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// TestUserAdd_NewPasswordRevokesTokens: `user add` of an existing user —
// the shell's password reset, run beside a serving controller — refuses
// every session and API token the user held, on that controller, while a
// login with the new password works. Both dialects: on
// PostgreSQL the controller is told; on SQLite it reads the refused set
// again with its heartbeat.
func TestUserAdd_NewPasswordRevokesTokens(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			sc := storetest.Config(t, d)
			e := ctltest.StartWith(t, sc, ctltest.Options{HeartbeatEvery: 100 * time.Millisecond})
			session := e.AddUser("alice", "operator")
			var api struct{ Token string }
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: session, Body: map[string]string{"name": "ci"}}, 201, &api)
			works := func(tok string) bool {
				resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: tok})
				return resp.StatusCode == 200
			}
			if !works(session) || !works(api.Token) {
				t.Fatal("alice's tokens do not work before the reset")
			}

			var out bytes.Buffer
			cfg := controller.Config{DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL}
			if err := userAdd(context.Background(), cfg, "alice", "operator", true, strings.NewReader("a new long password\n"), &out); err != nil {
				t.Fatal(err)
			}
			if want := "user alice updated (role operator, new password); every session and API token alice held is revoked (a controller serving this store refuses them within its heartbeat, 15s by default)\n"; out.String() != want {
				t.Fatalf("user add said %q, want %q", out.String(), want)
			}
			testwait.For(t, 10*time.Second, "alice's session and API token refused", func() bool { return !works(session) && !works(api.Token) })
			// A user's revocation counts whole seconds, as a token's iat
			// does: a login from the next second on works.
			testwait.For(t, 5*time.Second, "a login with the new password working", func() bool { return works(e.Login("alice", "a new long password")) })
		})
	}
}

// TestUserAdd_ResetKeepsTheRole: a password reset without --role keeps the
// user's role (it set the flag's default, viewer: the only admin, reset so,
// was demoted); with --role it sets it; a new user without one is a viewer.
func TestUserAdd_ResetKeepsTheRole(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	cfg := controller.Config{DataDir: sc.DataDir}
	add := func(name, role string) string {
		t.Helper()
		var out bytes.Buffer
		if err := userAdd(context.Background(), cfg, name, role, true, strings.NewReader("a long enough password\n"), &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if out := add("root", "admin"); !strings.Contains(out, "added (role admin)") {
		t.Fatal(out)
	}
	if out := add("root", ""); !strings.Contains(out, "updated (role admin, new password)") {
		t.Fatalf("a reset without --role: %s", out)
	}
	if out := add("root", "operator"); !strings.Contains(out, "updated (role operator, new password)") {
		t.Fatalf("a reset with --role: %s", out)
	}
	if out := add("newbie", ""); !strings.Contains(out, "added (role viewer)") {
		t.Fatalf("a new user without --role: %s", out)
	}
}
