package web_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMachinePage_ShowsShippedLines: the machine page (and its status
// fragment, refreshed every 2 s) shows each service's latest shipped
// lines with why and when, escaped; a machine that shipped none says when
// a host would.
func TestMachinePage_ShowsShippedLines(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("vera", "viewer")
	en := e.Enroll("m1")
	e.Enroll("m2")
	resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token,
		Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}})
	send := resp.Header.Get("X-Mesh-Send")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: map[string]any{
		"send": send, "generation": 1, "outcome": "checked", "logs": []map[string]any{
			{"resource": "web.service", "why": "restarted", "lines": []string{"starting", "<script>alert(1)</script> bind: address already in use"}, "truncated": true}}}}, 201, nil)
	vw := newBrowser(t, e.URL)
	vw.login("vera", "password-of-vera")

	for _, path := range []string{"/machines/m1", "/ui/machines/m1/status"} {
		st, body := vw.get(path)
		for _, want := range []string{`data-resource="web.service"`, `data-why="restarted"`, "shipped ", "generation 1", "older lines left out",
			"starting\n&lt;script&gt;alert(1)&lt;/script&gt; bind: address already in use</pre>"} {
			if st != 200 || !strings.Contains(body, want) {
				t.Fatalf("GET %s: %d, want %q in:\n%s", path, st, want, body)
			}
		}
		if strings.Contains(body, "<script>alert") {
			t.Fatalf("GET %s: a shipped line was not escaped", path)
		}
	}
	if st, body := vw.get("/machines/m2"); st != 200 || !strings.Contains(body, "No lines shipped") {
		t.Fatalf("m2: %d", st)
	}
	if _, body := vw.get("/machines/m1"); strings.Contains(body, `data-past`) {
		t.Fatalf("lines of the generation the machine is at are shown as past:\n%s", body)
	}

	// m1 applies generation 2 since: the lines of generation 1 are of an
	// earlier time, said so, not shown as what the machine is now.
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
		Body: map[string]any{"send": send, "generation": 1, "outcome": "applied"}}, 201, nil)
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"port": "9000"}}}, 200, nil)
	resp, _ = e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token,
		Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1", "If-None-Match": `"1"`}})
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
		Body: map[string]any{"send": resp.Header.Get("X-Mesh-Send"), "generation": 2, "outcome": "applied"}}, 201, nil)
	if _, body := vw.get("/machines/m1"); !strings.Contains(body, `data-past="true"`) || !strings.Contains(body, "before generation 2, applied since") {
		t.Fatalf("lines of generation 1 after generation 2 applied are not said to be of an earlier time:\n%s", body)
	}
}
