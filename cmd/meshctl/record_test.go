package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_TheRecord: an operator finds each send (to which machine,
// which generation, why, and what its host said), a machine's reports, and
// the declaration its generation composes to — and a preview makes no send;
// and one machine's, action's or actor's events in the audit log.
func TestMeshctl_TheRecord(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	en := e.Enroll("m1")
	e.Enroll("m2")
	resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token,
		Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}})
	send := resp.Header.Get("X-Mesh-Send")
	if resp.StatusCode != 200 || send == "" {
		t.Fatalf("poll: %d", resp.StatusCode)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: map[string]any{
		"send": send, "generation": 1, "outcome": "refused", "reason": "the disk is read-only\x1b]52;c;x\x07"}}, 201, nil)

	meshctl := asAdmin(t, e)

	out, errOut, code := meshctl("sends")
	if code != 0 || !strings.Contains(out, "MACHINE") || !strings.Contains(out, send) ||
		!strings.Contains(out, "refused: the disk is read-only\\x1b]52;c;x") || strings.Contains(out, "\x1b") {
		t.Fatalf("sends: exit %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = meshctl("sends", "m2")
	if code != 0 || strings.Contains(out, send) || strings.Count(out, "\n") != 1 {
		t.Fatalf("sends m2 (never polled): exit %d\n%s", code, out)
	}
	out, _, code = meshctl("sends", "m1", "-o", "json")
	var sl struct {
		Items []struct {
			ID, Machine, Trigger, Outcome string
			Generation                    int
		}
	}
	if err := json.Unmarshal([]byte(out), &sl); err != nil || code != 0 || len(sl.Items) != 1 ||
		sl.Items[0].ID != send || sl.Items[0].Machine != "m1" || sl.Items[0].Generation != 1 || sl.Items[0].Trigger != "enrol" || sl.Items[0].Outcome != "refused" {
		t.Fatalf("sends m1 -o json: exit %d %v\n%s", code, err, out)
	}

	out, _, code = meshctl("machines", "reports", "m1")
	if code != 0 || !strings.Contains(out, "refused") || !strings.Contains(out, send) || strings.Contains(out, "\x1b") {
		t.Fatalf("machines reports: exit %d\n%s", code, out)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: map[string]any{
		"send": send, "generation": 1, "outcome": "checked", "checks": []map[string]any{
			{"resource": "web.service", "ok": false, "at": "2026-12-01T10:00:00Z", "detail": "dial tcp 127.0.0.1:9: connection refused"},
			{"resource": "web.worker", "ok": true, "at": "2026-12-01T10:00:00Z"}}}}, 201, nil)
	out, _, _ = meshctl("machines", "reports", "m1")
	if !strings.Contains(out, "1 passing; failing web.service: dial tcp 127.0.0.1:9: connection refused") {
		t.Fatalf("a failing check is not shown:\n%s", out)
	}

	out, errOut, code = meshctl("machines", "declaration", "m1")
	var d struct {
		Machine    string
		Generation int
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 || d.Machine != "m1" || d.Generation != 1 ||
		!strings.HasPrefix(errOut, "m1 at generation 1 (enrol); digest sha256:") {
		t.Fatalf("machines declaration: exit %d %v\n%s\n%s", code, err, out, errOut)
	}
	if out, _, _ := meshctl("sends", "-o", "json"); strings.Count(out, `"id"`) != 1 {
		t.Fatalf("the preview made a send:\n%s", out)
	}

	out, _, code = meshctl("audit", "--machine", "m1")
	if code != 0 || !strings.Contains(out, "machine/m1") || strings.Contains(out, "machine/m2") {
		t.Fatalf("audit --machine m1: exit %d\n%s", code, out)
	}
	out, _, code = meshctl("audit", "--actor", "host:m2", "--action", "enroll", "-o", "json")
	if code != 0 || strings.Count(out, `"action": "enroll"`) != 1 || !strings.Contains(out, `"target": "machine/m2"`) {
		t.Fatalf("audit --actor host:m2 --action enroll: exit %d\n%s", code, out)
	}
	// Past a page of 500: the last page asked ends at --limit, so its
	// cursor is the one after the last event printed.
	for i := range 520 {
		if err := e.Ctl.Store.Audit(t.Context(), "user:admin", "push", "machine/m9", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	out, _, code = meshctl("audit", "--machine", "m9", "--limit", "510", "-o", "json")
	var pg struct {
		Items []struct{ Detail string }
		Next  string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(out), &pg); err != nil || code != 0 || len(pg.Items) != 510 || pg.Items[509].Detail != "10" || pg.Next == "" {
		t.Fatalf("audit --limit 510 -o json: exit %d %v, %d items, next %q", code, err, len(pg.Items), pg.Next)
	}
	var rest struct{ Items []struct{ Detail string } }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=machine/m9&cursor=" + pg.Next, Token: e.Admin}, 200, &rest)
	if len(rest.Items) != 10 || rest.Items[0].Detail != "9" {
		t.Fatalf("paging on from the printed cursor: %+v", rest.Items)
	}
	if _, errOut, code := meshctl("audit", "--target", "m1"); code != 0 || !strings.Contains(errOut, "a target is KIND/NAME") {
		t.Fatalf("audit --target m1: exit %d %s", code, errOut)
	}

	resp, body := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=" + strings.Repeat("x", 301), Token: e.Admin})
	if resp.StatusCode != 400 || !strings.Contains(string(body), "at most 300") {
		t.Fatalf("a target of 301 characters: %d %s", resp.StatusCode, body)
	}

	// A generation that cannot be composed is said whole: which module,
	// build and resource.
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "needs-port"}}, 201, nil)
	if resp, b := e.Upload(e.Admin, "needs-port", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/p.conf", "content": "port=${var.port}\n"}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %s", b)
	}
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m2/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "needs-port"}}}}, 200, nil)
	if _, errOut, code := meshctl("machines", "declaration", "m2"); code != 1 || !strings.Contains(errOut, "generation 2 cannot be composed: module needs-port build 1 resource conf: ") {
		t.Fatalf("machines declaration of a generation that cannot be composed: exit %d %s", code, errOut)
	}
	// The request was sound; the declared state is not: a 409, not a 400.
	if resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m2/declaration", Token: e.Admin}); resp.StatusCode != 409 ||
		!strings.Contains(string(b), `"urn:mesh:problem:not-composable"`) {
		t.Fatalf("preview of a generation that cannot be composed: %d %s", resp.StatusCode, b)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sends", "nobody"}, "meshctl: machine nobody: not found\n"},
		{[]string{"sends", "--limit", "0"}, "--limit: a number of sends from 1 up"},
		{[]string{"machines", "reports", "nobody"}, "meshctl: machine nobody: not found\n"},
		{[]string{"machines", "declaration", "nobody"}, "meshctl: machine nobody: not found\n"},
	} {
		if _, errOut, code := meshctl(tc.args...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("meshctl %v: exit %d, %s", tc.args, code, errOut)
		}
	}
}
