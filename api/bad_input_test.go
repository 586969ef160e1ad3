package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"mesh/api"
	"mesh/auth"
	"mesh/controller/ctltest"
	"mesh/models"
)

// regexpLastSeen matches what moves with the clock, not with a write: a
// host's last poll, and the state's words that count time since it ("the
// host last polled 3s ago" read 8s on a slow run).
var regexpLastSeen = regexp.MustCompile(`"last_seen":"[^"]*"|"state_words":\{[^}]*\}`)

// snapshot is what a refused request must not change.
func snapshot(t *testing.T, e *ctltest.Env) string {
	t.Helper()
	var parts []string
	for _, p := range []string{"/api/v1/machines", "/api/v1/modules", "/api/v1/sends", "/api/v1/modules/node-tools/builds",
		"/api/v1/machines/m1/assignments", "/api/v1/machines/m1/variables"} {
		_, b := e.Do(ctltest.Request{Method: "GET", Path: p, Token: e.Admin})
		parts = append(parts, string(b))
	}
	// last_seen moves with every poll, and the words that count since it
	// with the clock; neither is desired state.
	s := strings.Join(parts, "\n")
	return regexpLastSeen.ReplaceAllString(s, "")
}

func TestBadInput_ClearProblemAndNothingChanges(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		ctx := context.Background()
		a := e.Enroll("m1")
		b := e.Enroll("m2")
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "node-tools"}}, 201, nil)
		if resp, body := e.Upload(e.Admin, "node-tools", manifestWithVar, []byte("tree"), ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %s", body)
		}
		usedJoin := e.JoinToken()
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{"join_token": usedJoin, "name": "m3", "os": "linux", "arch": "amd64"}}, 201, nil)
		var expiring struct {
			Token     string
			ExpiresAt time.Time `json:"expires_at"`
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/join-tokens", Token: e.Admin, Body: map[string]string{"expires_in": "1ms"}}, 201, &expiring)
		waitFor(t, time.Second, func() bool { return time.Now().After(expiring.ExpiresAt) })

		keys, err := e.Ctl.Store.Keys(ctx, models.KeyToken)
		if err != nil || len(keys) != 1 {
			t.Fatalf("token key: %v", err)
		}
		priv := ed25519.NewKeyFromSeed(keys[0].PrivateKey)
		past := &auth.Authority{KeyID: keys[0].ID, Priv: priv, Now: func() time.Time { return time.Now().Add(-13 * time.Hour) }}
		expired, _, _ := past.IssuePerson("admin", "admin", past.Now())
		claims := jwt.MapClaims{"iss": auth.Issuer, "aud": auth.AudienceOperator, "sub": "admin", "role": "admin", "exp": time.Now().Add(time.Hour).Unix()}
		none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
		hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(keys[0].PublicKey))
		otherKey := func() string {
			_, k, _ := ed25519.GenerateKey(nil)
			tok, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(k)
			return tok
		}()
		wrongAud := jwt.MapClaims{"iss": auth.Issuer, "aud": "someone-else", "sub": "admin", "role": "admin", "exp": time.Now().Add(time.Hour).Unix()}
		wrongAudTok, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, wrongAud).SignedString(priv)
		viewer := e.AddUser("vera", models.RoleViewer)

		sendOfB := firstSend(t, e, b.Token)
		before := snapshot(t, e)
		bigJSON := `{"name": "` + strings.Repeat("x", 2<<20) + `"}`
		cases := []struct {
			name   string
			req    ctltest.Request
			status int
			ptype  string
		}{
			{"malformed JSON", ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: []byte(`{"name": "x"`)}, 400, "invalid"},
			{"not JSON", ctltest.Request{Method: "POST", Path: "/api/v1/auth/login", Body: []byte(`username=admin`)}, 400, "invalid"},
			{"unknown field", ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "x", "colour": "red"}}, 400, "invalid"},
			{"unknown field in assignments", ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin, Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools", "pinned": true}}}}, 400, "invalid"},
			{"trailing data", ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: []byte(`{"name": "x"} {}`)}, 400, "invalid"},
			{"oversized body", ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: []byte(bigJSON)}, 413, "too-large"},
			{"no token", ctltest.Request{Method: "GET", Path: "/api/v1/machines"}, 401, "unauthorized"},
			{"not a bearer", ctltest.Request{Method: "GET", Path: "/api/v1/machines", Header: map[string]string{"Authorization": "Basic YWRtaW46eA=="}}, 401, "unauthorized"},
			{"expired JWT", ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: expired}, 401, "unauthorized"},
			{"alg none", ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: none}, 401, "unauthorized"},
			{"HS256 keyed with the public key", ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: hs}, 401, "unauthorized"},
			{"signed by another key", ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: otherKey}, 401, "unauthorized"},
			{"wrong audience", ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: wrongAudTok}, 401, "unauthorized"},
			{"host token on an operator route", ctltest.Request{Method: "GET", Path: "/api/v1/machines/m2/declaration", Token: a.Token}, 401, "unauthorized"},
			{"host token assigning", ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: a.Token, Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []any{}}}, 401, "unauthorized"},
			{"person token on the host poll", ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=0s", Token: e.Admin}, 401, "unauthorized"},
			{"person token reporting", ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: e.Admin, Body: map[string]any{"generation": 1, "outcome": "applied"}}, 401, "unauthorized"},
			{"viewer assigning", ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: viewer, Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []any{}}}, 403, "forbidden"},
			{"viewer making a join token", ctltest.Request{Method: "POST", Path: "/api/v1/join-tokens", Token: viewer}, 403, "forbidden"},
			{"host A reporting on host B's send", ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: a.Token, Body: map[string]any{"send": sendOfB, "generation": 1, "outcome": "applied"}}, 403, "forbidden"},
			{"host A reading a blob it was never sent", ctltest.Request{Method: "GET", Path: "/api/v1/blobs/" + models.DigestOf([]byte("tree")), Token: a.Token}, 403, "forbidden"},
			{"reused join token", ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{"join_token": usedJoin, "name": "m4", "os": "linux", "arch": "amd64"}}, 403, "join-token-refused"},
			{"expired join token", ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{"join_token": expiring.Token, "name": "m4", "os": "linux", "arch": "amd64"}}, 403, "join-token-refused"},
			{"unknown join token", ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{"join_token": "nope", "name": "m4", "os": "linux", "arch": "amd64"}}, 403, "join-token-refused"},
			{"invalid machine name", ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{"join_token": e.JoinToken(), "name": "Bad Name", "os": "linux", "arch": "amd64"}}, 400, "invalid"},
			{"enrolment's schemas not a list of schemas", ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{"join_token": e.JoinToken(), "name": "m5", "os": "linux", "arch": "amd64", "schema": "<script>x</script>"}}, 400, "invalid"},
			{"invalid module name", ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "../etc"}}, 400, "invalid"},
			{"invalid variable key", ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin, Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"1bad-key": "x"}}}, 400, "invalid"},
			{"assigning an unknown module", ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin, Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "ghost"}}}}, 400, "invalid"},
			{"pinning a build that does not exist", ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin, Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools", "build": 9}}}}, 400, "invalid"},
			{"bad If-None-Match", ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=0s", Token: a.Token, Header: map[string]string{"If-None-Match": "yesterday"}}, 400, "invalid"},
			{"bad wait", ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=soon", Token: a.Token}, 400, "invalid"},
			{"bad report outcome", ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: a.Token, Body: map[string]any{"generation": 1, "outcome": "great"}}, 400, "invalid"},
			{"bad blob digest", ctltest.Request{Method: "GET", Path: "/api/v1/blobs/md5:abc", Token: e.Admin}, 400, "invalid"},
			{"unknown machine", ctltest.Request{Method: "GET", Path: "/api/v1/machines/ghost", Token: e.Admin}, 404, "not-found"},
			{"bad cursor", ctltest.Request{Method: "GET", Path: "/api/v1/machines?cursor=abc", Token: e.Admin}, 400, "invalid"},
			// A send's cursor is its id: other text was compared as one.
			{"bad cursor of sends", ctltest.Request{Method: "GET", Path: "/api/v1/sends?cursor=abc", Token: e.Admin}, 400, "invalid"},
			{"bad cursor of a machine's sends", ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/sends?cursor=zz", Token: e.Admin}, 400, "invalid"},
		}
		for _, c := range cases {
			resp, body := e.Do(c.req)
			if resp.StatusCode != c.status {
				t.Errorf("%s: status %d, want %d: %s", c.name, resp.StatusCode, c.status, body)
				continue
			}
			var p api.Problem
			if resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil {
				t.Errorf("%s: not problem+json: %s %s", c.name, resp.Header.Get("Content-Type"), body)
				continue
			}
			if p.Type != api.ProblemType(c.ptype) || p.Detail == "" || p.Status != c.status {
				t.Errorf("%s: problem %+v, want type %s with a detail", c.name, p, c.ptype)
			}
		}

		// An upload whose bytes do not match the digest given is refused and stores nothing.
		resp, body := e.Upload(e.Admin, "node-tools", manifestWithVar, []byte("other bytes"), models.DigestOf([]byte("tree")))
		if resp.StatusCode != 422 || !strings.Contains(string(body), "digest-mismatch") {
			t.Errorf("digest mismatch: %d %s", resp.StatusCode, body)
		}
		if after := snapshot(t, e); after != before {
			t.Errorf("refused requests changed the store:\nbefore %s\nafter  %s", before, after)
		}

		// Clamped, not refused: limit=1000000000 gives at most 500.
		var page struct {
			Items []struct{ Action, Target string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=1000000000", Token: e.Admin}, 200, &page)
		if len(page.Items) == 0 || len(page.Items) > api.MaxLimit {
			t.Errorf("clamped limit gave %d items", len(page.Items))
		}
		// Refused enrolments (reused, expired, unknown join token) are on
		// the record, once a minute per address (the next record counts
		// the rest): an outsider's guesses are not a row each.
		refused := 0
		for _, a := range page.Items {
			if a.Action == "enroll-refused" && a.Target == "machine/m4" {
				refused++
			}
		}
		if refused != 1 {
			t.Errorf("%d rows of 3 refused enrolments from one address in the audit log, want 1", refused)
		}
	})
}

func firstSend(t *testing.T, e *ctltest.Env, token string) string {
	t.Helper()
	p := doPoll(e, token, 0, "1s")
	if p.status != 200 {
		t.Fatalf("first poll %d", p.status)
	}
	return p.send
}

// TestNoRoute_SaysWhichAndWhere: a path the API has no route for is a
// 404 naming the method and path and where the routes are, where it said
// "Not Found" twice (a controller URL given with /api/v1 in it).
func TestNoRoute_SaysWhichAndWhere(t *testing.T) {
	e := ctltest.Start(t, "sqlite")
	req, _ := http.NewRequest("GET", e.URL+"/api/v1/api/v1/machines", nil) // in no spec: sent as is
	req.Header.Set("Authorization", "Bearer "+e.Admin)
	resp, err := http.DefaultClient.Do(req) // e.HTTP checks every answer against the spec
	if err == nil {
		t.Cleanup(http.DefaultClient.CloseIdleConnections)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(b), "no route GET /api/v1/api/v1/machines: the API's routes are in /openapi.yaml") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// A route that did not find its thing keeps its own words.
	resp, b = e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/nosuch", Token: e.Admin})
	if resp.StatusCode != 404 || strings.Contains(string(b), "no route") || !strings.Contains(string(b), "nosuch") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestMethodNotAllowed_SaysWhichAndWhatItTakes: a method a route does not
// take was answered "Method Not Allowed" and no more.
func TestMethodNotAllowed_SaysWhichAndWhatItTakes(t *testing.T) {
	e := ctltest.Start(t, "sqlite")
	req, _ := http.NewRequest("DELETE", e.URL+"/api/v1/host/declaration", nil) // in no spec: sent as is
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 405 || !strings.Contains(string(b), "DELETE is not allowed on /api/v1/host/declaration; it takes ") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// TestReports_BytesNotUTF8AreRefusedAlike: a report whose JSON decoded
// (Go reads bytes that are not UTF-8 as U+FFFD) was stored as sent: taken
// by SQLite, and refused by PostgreSQL with words blaming a NUL it did
// not hold.
func TestReports_BytesNotUTF8AreRefusedAlike(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		a := e.Enroll("m1")
		send := firstSend(t, e, a.Token)
		body := []byte(`{"send":"` + send + `","generation":1,"outcome":"applied","reason":"caf` + "\xe9" + `"}`)
		resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: a.Token, Body: body,
			Header: map[string]string{models.HostTimeHeader: time.Now().UTC().Format(time.RFC3339)}})
		var p struct{ Detail string }
		_ = json.Unmarshal(b, &p)
		if resp.StatusCode != 400 || !strings.Contains(p.Detail, "UTF-8") || strings.Contains(p.Detail, "NUL") {
			t.Fatalf("report with a Latin-1 byte (no NUL): %d %s, want 400 saying it is not UTF-8", resp.StatusCode, b)
		}
	})
}

// TestStrictBodies_FieldNamesMatchExactly: request bodies are decoded
// strictly (openapi.yaml: additionalProperties false), yet encoding/json
// took "NAME" for "name" and the last of a field given twice.
func TestStrictBodies_FieldNamesMatchExactly(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		for body, want := range map[string]string{
			`{"NAME":"shouted"}`:               `unknown field "NAME"`,
			`{"name":"first","name":"second"}`: `field "name" is given twice`,
			`{"name":"caf` + "\xe9" + `"}`:     `not valid UTF-8`,
		} {
			resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: []byte(body)})
			var p struct{ Detail string }
			_ = json.Unmarshal(b, &p)
			if resp.StatusCode != 400 || !strings.Contains(p.Detail, want) {
				t.Errorf("%s: %d %s, want 400 saying %s", body, resp.StatusCode, b, want)
			}
		}
		resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/modules", Token: e.Admin})
		if resp.StatusCode != 200 || strings.Contains(string(b), `"name":"`) {
			t.Errorf("modules after refused bodies: %d %s, want none", resp.StatusCode, b)
		}
	})
}

// TestVariables_NulRefusedOnEveryStore: a variable's value with a NUL was
// refused on PostgreSQL (its text cannot hold one) and taken on SQLite,
// into a new generation and its declaration.
func TestVariables_NulRefusedOnEveryStore(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.Enroll("m1")
		resp, b := e.Do(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: []byte(`{"variables":{"PORT":"80\u0000"}}`)})
		if resp.StatusCode != 400 || !strings.Contains(string(b), "PORT") || !strings.Contains(string(b), "NUL") {
			t.Fatalf("variable with a NUL: %d %s, want 400 naming PORT and the NUL", resp.StatusCode, b)
		}
	})
}

// TestNul_RefusedAlikeOnEveryStore: a variable's NUL was refused on both
// stores, but the other words a person writes were not: PostgreSQL refused
// a NUL in a module's repository, a yank's reason or a revocation's
// reason (with no field named), SQLite stored it — the build yanked, the
// machine revoked, on one store and not the other.
func TestNul_RefusedAlikeOnEveryStore(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
		const page = `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "v\n"}]}`
		for range 2 {
			if resp, b := e.Upload(e.Admin, "web", page, nil, ""); resp.StatusCode != 201 {
				t.Fatalf("upload: %d %s", resp.StatusCode, b)
			}
		}
		e.Enroll("m1")
		for _, c := range []struct{ method, path, body, field string }{
			{"POST", "/api/v1/modules", `{"name":"app","repository":"org/app\u0000evil"}`, "/repository"},
			{"POST", "/api/v1/modules/web/builds/1/yank", `{"reason":"bad\u0000build"}`, "/reason"},
			{"POST", "/api/v1/machines/m1/revoke", `{"reason":"stolen\u0000laptop"}`, "/reason"},
			{"PUT", "/api/v1/machines/m1/labels", `{"labels":{"role":"w\u0000eb"}}`, "/labels/role"},
		} {
			resp, b := e.Do(ctltest.Request{Method: c.method, Path: c.path, Token: e.Admin, Body: []byte(c.body),
				Header: map[string]string{"If-Match": `"1"`}})
			var p struct{ Detail string }
			_ = json.Unmarshal(b, &p)
			if resp.StatusCode != 400 || !strings.Contains(p.Detail, c.field) || !strings.Contains(p.Detail, "NUL") {
				t.Errorf("%s %s %s: %d %s, want 400 naming %s", c.method, c.path, c.body, resp.StatusCode, b, c.field)
			}
		}
		var m struct {
			State string `json:"state"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		if m.State == "revoked" {
			t.Error("m1 was revoked by a refused request")
		}
	})
}

// TestUpload_TextNotUTF8OrWithANulIsRefusedAlikeOnEveryStore: a build's
// upload (multipart) took a manifest that is not UTF-8 (read by
// encoding/json as U+FFFD) and a commit holding a NUL: SQLite made the
// build, PostgreSQL refused it naming no field.
func TestUpload_TextNotUTF8OrWithANulIsRefusedAlikeOnEveryStore(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
		const good = `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "v\n"}]}`
		const notUTF8 = "{\"resources\": [{\"name\": \"conf\", \"kind\": \"file\", \"path\": \"/etc/app.conf\", \"content\": \"caf\xe9\\n\"}]}"
		for _, c := range []struct{ what, manifest, commit, field string }{
			{"a manifest that is not UTF-8", notUTF8, "c1", "manifest"},
			{"a commit holding a NUL", good, "c2\x00evil", "commit"},
		} {
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			_ = mw.WriteField("manifest", c.manifest)
			_ = mw.WriteField("version", "1.0.0")
			_ = mw.WriteField("commit", c.commit)
			mw.Close()
			resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/modules/web/builds", Token: e.Admin, Body: buf.Bytes(),
				Header: map[string]string{"Content-Type": mw.FormDataContentType()}})
			if resp.StatusCode != 400 || !strings.Contains(string(b), c.field) {
				t.Errorf("%s: %d %.300s, want 400 naming %s", c.what, resp.StatusCode, b, c.field)
			}
		}
	})
}
