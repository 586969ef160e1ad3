package main

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_ReportChecksHideNoBidiControls: a host's check, as
// `meshctl machines reports` shows it from the report's body, is shown
// with its bidirectional and zero-width characters escaped, as the
// dashboard and every other host word are: "\u202e" reorders what follows
// it on the operator's terminal ("...: ko ti" read as "it ok"), and a
// zero-width space makes a check's name look like another's.
func TestMeshctl_ReportChecksHideNoBidiControls(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	en := e.Enroll("m1")
	resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token,
		Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}})
	send := resp.Header.Get("X-Mesh-Send")
	if resp.StatusCode != 200 || send == "" {
		t.Fatalf("poll: %d", resp.StatusCode)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: map[string]any{
		"send": send, "generation": 1, "outcome": "checked", "checks": []map[string]any{
			{"resource": "web\u200b.service", "ok": false, "at": "2026-12-01T10:00:00Z", "detail": "status \u202e002 ,ko"}}}}, 201, nil)
	meshctl := asAdmin(t, e)
	out, errOut, code := meshctl("machines", "reports", "m1")
	if code != 0 {
		t.Fatalf("machines reports: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.ContainsAny(out, "\u202e\u200b") {
		t.Fatalf("a check's bidirectional or zero-width character reached the terminal as is:\n%q", out)
	}
}
