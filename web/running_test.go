package web_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestMachine_ShowsYankedRunning: a machine keeps a build yanked since it
// took it, and both the API and the dashboard say so.
func TestMachine_ShowsYankedRunning(t *testing.T) {
	e, op, _ := fixture(t)
	en := e.Enroll("m2")
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m2/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools"}}}}, 200, nil)
	resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=1s", Token: en.Token,
		Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}})
	if resp.StatusCode != 200 {
		t.Fatalf("poll: %d", resp.StatusCode)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: map[string]any{
		"send": resp.Header.Get("X-Mesh-Send"), "generation": 2, "outcome": "applied", "attempt": 1, "host_version": "1.0.0",
		"running": map[string]any{"node-tools": map[string]any{"build": 1}}}}, 201, nil)
	if r, b := e.Upload(e.Admin, "node-tools", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": "y\n"}]}`, nil, ""); r.StatusCode != 201 {
		t.Fatalf("upload: %s", b)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/node-tools/current", Token: e.Admin, Body: map[string]any{"build": 2}}, 200, nil)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/node-tools/builds/1/yank", Token: e.Admin, Body: map[string]any{"reason": "bad config"}}, 200, nil)

	var m struct {
		Yanked []struct {
			Module string
			Build  int64
			Reason string
		}
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m2", Token: e.Admin}, 200, &m)
	if len(m.Yanked) != 1 || m.Yanked[0].Module != "node-tools" || m.Yanked[0].Build != 1 || m.Yanked[0].Reason != "bad config" {
		t.Fatalf("API: yanked %+v", m.Yanked)
	}
	st, body := op.get("/machines/m2")
	if st != 200 || !strings.Contains(body, `class="yanked"`) || !strings.Contains(body, "bad config") {
		t.Fatalf("dashboard: %d, no yanked mark:\n%.2000s", st, body)
	}
}
