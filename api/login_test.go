package api_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/testwait"
)

// TestLogin_GuessingIsThrottled: 40 wrong passwords then the right one
// used to answer 200 (about 13 guesses a second, unlimited). Now the
// guesser gets 429 with Retry-After, on the record, and a person from
// another address still logs in.
func TestLogin_GuessingIsThrottled(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("carol", "operator")
	login := func(pw, from string) (int, string) {
		resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login",
			Body: map[string]string{"username": "carol", "password": pw}, Header: map[string]string{"X-Real-Ip": from}})
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	throttled := 0
	for range 40 {
		if st, _ := login("a-wrong-password", "127.0.0.1"); st == 429 {
			throttled++
		}
	}
	if throttled == 0 {
		t.Fatal("40 wrong passwords in a row were never throttled")
	}
	st, retry := login("password-of-carol", "127.0.0.1")
	if n, _ := strconv.Atoi(retry); st != 429 || n < 1 || n > 30 {
		t.Fatalf("the right password after 40 guesses: %d, Retry-After %q; want 429 within 30 s", st, retry)
	}
	// On the record once, not once an attempt: each throttled attempt
	// was a write of its own, thousands a second from one client.
	for range 20 {
		login("a-wrong-password", "127.0.0.1")
	}
	var audit struct {
		Items []struct{ Action, Detail string }
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=100", Token: e.Admin}, 200, &audit)
	rows := 0
	for _, a := range audit.Items {
		if a.Action == "login-throttled" {
			rows++
		}
	}
	if rows != 1 {
		t.Fatalf("%d throttled logins made %d audit rows, want 1", throttled+21, rows)
	}
}

// TestPassword_ThrottledChangesOnTheRecordOnce: a person guessing their
// current password is throttled as a login is, and the throttled attempts
// are one audit row, not one each (a viewer wrote 4,000 rows a second).
func TestPassword_ThrottledChangesOnTheRecordOnce(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	tok := e.AddUser("vic", "viewer")
	throttled := 0
	for range 60 {
		resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/password", Token: tok,
			Body: map[string]string{"current_password": "a-wrong-password", "new_password": "whatever-whatever-1"}})
		if resp.StatusCode == 429 {
			throttled++
		}
	}
	if throttled < 20 {
		t.Fatalf("%d of 60 wrong current passwords throttled", throttled)
	}
	var audit struct {
		Items []struct{ Action, Detail string }
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=100", Token: e.Admin}, 200, &audit)
	rows := 0
	for _, a := range audit.Items {
		if a.Action == "password-change-throttled" {
			rows++
		}
	}
	if rows != 1 {
		t.Fatalf("%d throttled password changes made %d audit rows, want 1", throttled, rows)
	}
}

// TestBody_NullRefused: a JSON null body (POST /join-tokens took it and
// made a token) is refused with a clear problem.
func TestBody_NullRefused(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/join-tokens", Token: e.Admin, Body: []byte("null"),
		Header: map[string]string{"Content-Type": "application/json"}})
	if resp.StatusCode != 400 || !strings.Contains(string(body), "not null") {
		t.Fatalf("a null body: %d %s", resp.StatusCode, body)
	}
}

// TestLogin_LongNamesCostLittle: a login's body is read before anything
// is checked, so it is capped small (413 past 64 KiB), and a failed
// attempt with a long name is audited and throttled under the name's
// start: an outsider's megabyte names once made megabyte audit rows.
func TestLogin_LongNamesCostLittle(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login",
		Body: map[string]string{"username": strings.Repeat("u", 100<<10), "password": "x"}})
	if resp.StatusCode != 413 {
		t.Fatalf("a 100 KiB login: %d, want 413", resp.StatusCode)
	}
	if !strings.Contains(string(body), "over this route's limit of 64KiB") {
		t.Errorf("the 413 does not name the limit: %s", body)
	}
	for range 6 { // past the free failures: the throttled attempts are audited too, one row a minute
		resp, _ = e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login",
			Body: map[string]string{"username": strings.Repeat("u", 60<<10), "password": "x"}})
		if resp.StatusCode != 401 && resp.StatusCode != 429 {
			t.Fatalf("a 60 KiB name: %d, want 401 or 429", resp.StatusCode)
		}
	}
	var audit struct {
		Items []struct{ Action, Target string }
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=100", Token: e.Admin}, 200, &audit)
	n := 0
	for _, a := range audit.Items {
		if strings.HasPrefix(a.Action, "login-") {
			n++
			if len(a.Target) > 80 {
				t.Errorf("%s audited with a target of %d bytes", a.Action, len(a.Target))
			}
		}
	}
	if n != 5 { // four failures, then one row for the two throttled
		t.Errorf("%d failed logins audited, want 5", n)
	}
}

// TestPassword_ChangeOwn: a person sets their own password given the
// current one; every token of theirs (this session and their API tokens)
// is refused from then on, the old password no longer logs in and the new
// one does; a wrong current password is 403, audited, and counts as a
// failed login (throttled past the free ones).
func TestPassword_ChangeOwn(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		session := e.AddUser("carol", "operator")
		var api struct{ Token string }
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/api-tokens", Token: session, Body: map[string]string{"name": "ci"}}, 201, &api)
		change := func(tok, current, next string) int {
			resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/password", Token: tok,
				Body: map[string]string{"current_password": current, "new_password": next}})
			return resp.StatusCode
		}
		if st := change(session, "not-carols-password", "a brand new password"); st != 403 {
			t.Fatalf("a wrong current password: %d, want 403", st)
		}
		if st := change(session, "password-of-carol", "short"); st != 400 {
			t.Fatalf("a too short new password: %d, want 400", st)
		}
		if st := change(session, "password-of-carol", "a brand new password"); st != 204 {
			t.Fatalf("the change: %d, want 204", st)
		}
		works := func(tok string) bool {
			resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: tok})
			return resp.StatusCode == 200
		}
		testwait.For(t, 10*time.Second, "carol's session and API token refused", func() bool { return !works(session) && !works(api.Token) })
		resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login", Body: map[string]string{"username": "carol", "password": "password-of-carol"}})
		if resp.StatusCode != 401 {
			t.Fatalf("the old password: %d, want 401", resp.StatusCode)
		}
		testwait.For(t, 5*time.Second, "a login with the new password working", func() bool { return works(e.Login("carol", "a brand new password")) })
		var audit struct{ Items []struct{ Action string } }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=100", Token: e.Admin}, 200, &audit)
		seen := map[string]bool{}
		for _, a := range audit.Items {
			seen[a.Action] = true
		}
		if !seen["password-change-refused"] || !seen["update-user"] {
			t.Fatalf("audit: %v", seen)
		}
	})
}
