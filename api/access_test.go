package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
)

type joinTokenInfo struct {
	ID        int64  `json:"id"`
	State     string `json:"state"`
	CreatedBy string `json:"created_by"`
	UsedBy    string `json:"used_by"`
	RevokedBy string `json:"revoked_by"`
}

type auditEvent struct {
	Actor, Action, Target, Detail string
}

// audited reads the newest audit events.
func audited(e *ctltest.Env) []auditEvent {
	e.T.Helper()
	var l struct{ Items []auditEvent }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=50", Token: e.Admin}, 200, &l)
	return l.Items
}

func hasAudit(es []auditEvent, action, target string) bool {
	for _, ev := range es {
		if ev.Action == action && ev.Target == target {
			return true
		}
	}
	return false
}

func enrolWith(e *ctltest.Env, token, name string) (int, string) {
	e.T.Helper()
	resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{
		"join_token": token, "name": name, "os": "linux", "arch": "amd64", "host_version": "1.0.0", "schema": "1"}})
	return resp.StatusCode, string(b)
}

func TestJoinTokens_ListAndRevoke(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		used := e.JoinToken()
		if st, b := enrolWith(e, used, "m1"); st != 201 {
			t.Fatalf("enrol: %d %s", st, b)
		}
		spare := e.JoinToken()

		var l struct {
			Items      []joinTokenInfo
			NextCursor string `json:"next_cursor"`
		}
		resp, raw := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/join-tokens", Token: e.Admin})
		if resp.StatusCode != 200 || strings.Contains(string(raw), spare) || strings.Contains(string(raw), "hash") {
			t.Fatalf("list: %d %s (must show neither secret nor hash)", resp.StatusCode, raw)
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/join-tokens", Token: e.Admin}, 200, &l)
		if len(l.Items) != 2 || l.Items[0].State != "unused" || l.Items[1].State != "used" || l.Items[1].UsedBy != "m1" ||
			l.Items[0].CreatedBy == "" {
			t.Fatalf("list: %+v", l.Items)
		}
		spareID, usedID := l.Items[0].ID, l.Items[1].ID

		var page struct {
			Items      []joinTokenInfo
			NextCursor string `json:"next_cursor"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/join-tokens?limit=1", Token: e.Admin}, 200, &page)
		if len(page.Items) != 1 || page.NextCursor == "" {
			t.Fatalf("page: %+v", page)
		}

		t.Run("OK", func(t *testing.T) {
			var got joinTokenInfo
			e.JSON(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/join-tokens/%d/revoke", spareID), Token: e.Admin}, 200, &got)
			if got.State != "revoked" || got.RevokedBy == "" {
				t.Fatalf("revoked: %+v", got)
			}
			if !hasAudit(audited(e), "revoke-join-token", fmt.Sprintf("join-token/%d", spareID)) {
				t.Fatal("revoke not audited")
			}
			// Refused at enrolment like a used one, and the refusal audited.
			st, b := enrolWith(e, spare, "m2")
			if st != 403 || !strings.Contains(b, "join-token-refused") {
				t.Fatalf("enrol with a revoked token: %d %s", st, b)
			}
			if !hasAudit(audited(e), "enroll-refused", "machine/m2") {
				t.Fatal("refused enrolment not audited")
			}
			// Twice changes nothing.
			e.JSON(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/join-tokens/%d/revoke", spareID), Token: e.Admin}, 200, &got)
			if got.State != "revoked" {
				t.Fatalf("revoked twice: %+v", got)
			}
		})
		t.Run("ErrUsed", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/join-tokens/%d/revoke", usedID), Token: e.Admin}, 409, nil)
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/join-tokens/99999/revoke", Token: e.Admin}, 404, nil)
		})
		t.Run("ErrBadID", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/join-tokens/abc/revoke", Token: e.Admin}, 400, nil)
		})
		t.Run("ErrNotAdmin", func(t *testing.T) {
			op := e.AddUser("olga", "operator")
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/join-tokens", Token: op}, 403, nil)
			e.JSON(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/join-tokens/%d/revoke", spareID), Token: op}, 403, nil)
		})
	})
}

func TestUsers_List(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		op := e.AddUser("olga", "operator")
		e.AddUser("vic", "viewer")
		t.Run("OK", func(t *testing.T) {
			resp, raw := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/users", Token: e.Admin})
			if resp.StatusCode != 200 || strings.Contains(string(raw), "hash") || strings.Contains(string(raw), "$2a$") ||
				strings.Contains(string(raw), "password") {
				t.Fatalf("list: %d %s (must show no password hash)", resp.StatusCode, raw)
			}
			var l struct {
				Items []struct {
					Name, Role string
					CreatedAt  string `json:"created_at"`
				}
			}
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/users", Token: e.Admin}, 200, &l)
			if len(l.Items) != 3 || l.Items[0].Name != "vic" || l.Items[0].Role != "viewer" || l.Items[1].Name != "olga" ||
				l.Items[2].Role != "admin" || l.Items[0].CreatedAt == "" {
				t.Fatalf("users: %+v", l.Items)
			}
			var page struct {
				Items      []struct{ Name string }
				NextCursor string `json:"next_cursor"`
			}
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/users?limit=2", Token: e.Admin}, 200, &page)
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/users?limit=2&cursor=" + page.NextCursor, Token: e.Admin}, 200, &page)
			if len(page.Items) != 1 || page.Items[0].Name != l.Items[2].Name {
				t.Fatalf("second page: %+v", page)
			}
		})
		t.Run("ErrNotAdmin", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/users", Token: op}, 403, nil)
		})
	})
}

// TestAccess_HostModuleBuildsByAdmin: a mesh-host module's builds become
// host releases, signed and rolled out to the fleet, which only an admin
// may make: an operator may neither make such a module, nor upload its
// builds, nor change where they come from (an operator once made a
// release, and its rollout, this way, past POST /host-releases' rule).
func TestAccess_HostModuleBuildsByAdmin(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1") // linux/amd64: a release for it is of use
	op := e.AddUser("opa", models.RoleOperator)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: op, Body: map[string]any{"name": "mesh-host", "kind": "host"}}, 403, nil)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "mesh-host", "kind": "host"}}, 201, nil)
	hostBuild := func(token string) (*http.Response, []byte) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		for k, v := range map[string]string{"manifest": `{"resources": []}`, "version": "9.9.9", "os": "linux", "arch": "amd64", "schemas": "1,2"} {
			_ = mw.WriteField(k, v)
		}
		w, _ := mw.CreateFormFile("artifact", "mesh-host")
		_, _ = w.Write([]byte("a mesh-host binary"))
		mw.Close()
		return e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/modules/mesh-host/builds", Token: token, Body: buf.Bytes(),
			Header: map[string]string{"Content-Type": mw.FormDataContentType()}})
	}
	if resp, b := hostBuild(op); resp.StatusCode != 403 {
		t.Fatalf("an operator's host build: %d %s, want 403", resp.StatusCode, b)
	}
	e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/mesh-host", Token: op, Header: map[string]string{"If-Match": `"x"`},
		Body: map[string]any{"repository": "someone/else"}}, 403, nil)
	var rels struct {
		Items []any `json:"items"`
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases", Token: e.Admin}, 200, &rels)
	if len(rels.Items) != 0 {
		t.Fatalf("releases %v, want none", rels.Items)
	}
	// An operator's own service modules are theirs as before.
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: op, Body: map[string]any{"name": "web"}}, 201, nil)
	if resp, b := hostBuild(e.Admin); resp.StatusCode != 201 {
		t.Fatalf("the admin's host build: %d %s, want 201", resp.StatusCode, b)
	}
}

// TestMachines_ListByState: ?state= lists only the machines in that state
// as judged now, newest first, page by page; an unknown state is 400
// (it was ignored, and every machine listed).
func TestMachines_ListByState(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		cur := e.Enroll("m-current")
		p := doPoll(e, cur.Token, 0, "5s")
		report(e, cur.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied"})
		for _, n := range []string{"m-a", "m-b", "m-c"} {
			e.Enroll(n) // enrolled, never polled: behind
		}
		type list struct {
			Items []struct {
				Name, State string
			}
			NextCursor string `json:"next_cursor"`
		}
		var l list
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines?state=current", Token: e.Admin}, 200, &l)
		if len(l.Items) != 1 || l.Items[0].Name != "m-current" {
			t.Fatalf("current: %+v", l.Items)
		}
		var names []string
		path := "/api/v1/machines?state=behind&limit=2"
		for path != "" {
			l = list{}
			e.JSON(ctltest.Request{Method: "GET", Path: path, Token: e.Admin}, 200, &l)
			for _, m := range l.Items {
				if m.State != "behind" {
					t.Fatalf("%s listed as behind is %s", m.Name, m.State)
				}
				names = append(names, m.Name)
			}
			path = ""
			if l.NextCursor != "" {
				path = "/api/v1/machines?state=behind&limit=2&cursor=" + l.NextCursor
			}
		}
		if strings.Join(names, ",") != "m-c,m-b,m-a" {
			t.Fatalf("behind, newest first over pages: %v", names)
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines?state=lagging", Token: e.Admin}, 400, nil)
	})
}

// TestReports_RateLimitedPerMachine: one host's reports are bounded (60 at
// once, then one a second) with 429 and Retry-After, which its outbox
// honours; another machine's host is not slowed (a host once stored 20 MB
// of reports a second, read back by every refresh of its page).
func TestReports_RateLimitedPerMachine(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	flood, other := e.Enroll("m1"), e.Enroll("m2")
	post := func(token string) *http.Response {
		resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: token,
			Body: map[string]any{"generation": 0, "outcome": "refused", "reason": "x"}})
		return resp
	}
	refused := 0
	for range 80 {
		if resp := post(flood.Token); resp.StatusCode == 429 {
			refused++
			if resp.Header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		}
	}
	if refused < 10 {
		t.Fatalf("%d of 80 reports at once refused, want the ones past 60", refused)
	}
	if resp := post(other.Token); resp.StatusCode != 201 {
		t.Fatalf("another machine's report: %d", resp.StatusCode)
	}
	// The refusals are on the record, a row a minute (they were not: a
	// host's reports refused for its pace left no word anywhere).
	if err := e.Ctl.Server.RecordPendingRefusals(t.Context()); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, ev := range audited(e) {
		if ev.Action == "report-refused" && ev.Target == "machine/m1" {
			rows++
		}
	}
	if rows == 0 || rows > 2 {
		t.Fatalf("%d reports of m1 refused for their pace: %d report-refused rows on the record, want one or two", refused, rows)
	}
}

// TestReports_BytesBoundedPerMachine: one host's reports are bounded in
// bytes too — 4 MiB at once, then 16 KiB a second — so a host cannot store
// a megabyte a second for as long as reports are kept (a review stored
// 200 MB in minutes at one report a second); each 429 says so and nothing
// of it is stored. A page of its reports, through the API, reads no more
// than 4 MiB of bodies and goes on from its cursor.
func TestReports_BytesBoundedPerMachine(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	flood, other := e.Enroll("m1"), e.Enroll("m2")
	post := func(token string, kib int) (*http.Response, []byte) {
		return e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: token,
			Body: map[string]any{"generation": 0, "outcome": "refused", "reason": "x", "pad": strings.Repeat("A", kib<<10-100)}})
	}
	stored := 0
	for range 6 {
		resp, b := post(flood.Token, 1000)
		if resp.StatusCode == 201 {
			stored++
			continue
		}
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "KiB of reports") {
			t.Fatalf("a report past the bytes allowed: %d %s", resp.StatusCode, b)
		}
	}
	if stored != 4 {
		t.Fatalf("%d reports of 1000 KiB stored at once, want 4", stored)
	}
	if resp, _ := post(other.Token, 1000); resp.StatusCode != 201 {
		t.Fatalf("another machine's report: %d", resp.StatusCode)
	}
	// Two more straight into the store, as if they came over minutes.
	m1, err := e.Ctl.Store.Machine(context.Background(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		body := `{"generation":0,"outcome":"refused","reason":"x","pad":"` + strings.Repeat("A", 1000<<10) + `"}`
		r, _ := models.DecodeReport([]byte(body))
		if _, err := e.Ctl.Store.InsertReport(context.Background(), m1.ID, r, []byte(body)); err != nil {
			t.Fatal(err)
		}
		stored++
	}
	var seen int
	cursor := ""
	for pages := 0; ; pages++ {
		var l struct {
			Items      []json.RawMessage
			NextCursor string `json:"next_cursor"`
		}
		resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/reports?limit=500&cursor=" + cursor, Token: e.Admin})
		if resp.StatusCode != 200 || json.Unmarshal(b, &l) != nil {
			t.Fatalf("reports: %d", resp.StatusCode)
		}
		if len(b) > 5<<20 {
			t.Fatalf("a page of %d bytes", len(b))
		}
		seen += len(l.Items)
		if cursor = l.NextCursor; cursor == "" {
			if pages == 0 {
				t.Fatal("4 MiB of reports in one page")
			}
			break
		}
	}
	if seen != stored {
		t.Fatalf("%d reports over the pages, %d stored", seen, stored)
	}
}

// TestHostWords_RefusedWhereTheyEnter: a host's version with a control
// character (or longer than a version) is refused on the poll as in a
// report, and an enrolment's os and arch must be platform words: each is
// kept on the machine and shown wherever it is (a 200 KB version header
// once sat on every overview row).
func TestHostWords_RefusedWhereTheyEnter(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	en := e.Enroll("m1")
	// (Go's client sends no control character in a header; the length is
	// what a header can carry here.)
	for _, v := range []string{strings.Repeat("9", 200), "1.0.0 " + strings.Repeat("x", 100)} {
		resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=0s", Token: en.Token,
			Header: map[string]string{"X-Mesh-Host-Version": v, "X-Mesh-Schema": "1"}})
		if resp.StatusCode != 400 {
			t.Errorf("a poll as host %q: %d, want 400", v[:10], resp.StatusCode)
		}
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{
		"join_token": e.JoinToken(), "name": "m2", "os": "linux\x1b[2K", "arch": "amd64", "host_version": "1.0.0", "schema": "1"}}, 400, nil)
}
