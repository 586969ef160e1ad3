package api_test

import (
	"strconv"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
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
	var audit struct{ Items []struct{ Action string } }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=100", Token: e.Admin}, 200, &audit)
	seen := false
	for _, a := range audit.Items {
		seen = seen || a.Action == "login-throttled"
	}
	if !seen {
		t.Fatal("throttled logins are not on the record")
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
	resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login",
		Body: map[string]string{"username": strings.Repeat("u", 100<<10), "password": "x"}})
	if resp.StatusCode != 413 {
		t.Fatalf("a 100 KiB login: %d, want 413", resp.StatusCode)
	}
	for range 6 { // past the free failures: throttled attempts are audited too
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
	if n != 6 {
		t.Errorf("%d failed logins audited, want 6", n)
	}
}
