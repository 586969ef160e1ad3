package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestReports_UpgradedRefusedAfterFailedTrial: the upgraded report of a
// trial the controller failed (its poll advertised schemas 1,2; the
// release records 1) is 409 trial-failed with why, so the host writes no
// reconcile marker and its launcher puts known-good back; the rolled_back
// report that follows is taken.
func TestReports_UpgradedRefusedAfterFailedTrial(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		if p := pollSchema(e, en.Token, 0, "1"); p.status != 200 {
			t.Fatalf("first poll: %d %s", p.status, p.body)
		}
		if resp, b := e.UploadReleaseSchemas(e.Admin, "2.0.0", "1", []byte("a mesh-host binary")); resp.StatusCode != 201 {
			t.Fatalf("release: %d %s", resp.StatusCode, b)
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/2.0.0/rollout", Token: e.Admin}, 201, nil)

		// The trial polls as 2.0.0 and advertises what its binary decodes.
		resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=1s", Token: en.Token,
			Header: map[string]string{"X-Mesh-Host-Version": "2.0.0", "X-Mesh-Schema": "1,2", "If-None-Match": `"1"`}})
		if resp.StatusCode != 200 && resp.StatusCode != 304 {
			t.Fatalf("trial poll: %d %s", resp.StatusCode, b)
		}
		var ro struct{ State, Reason string }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases/2.0.0/rollout", Token: e.Admin}, 200, &ro)
		if ro.State != "halted" || ro.Reason != "machine m1 failed: its trial poll advertised schemas 1,2; release 2.0.0 records 1" {
			t.Fatalf("rollout = %+v", ro)
		}
		// A halted rollout is over: resuming it says the way on (it said
		// only "cannot resume it").
		if resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/2.0.0/rollout/resume", Token: e.Admin}); resp.StatusCode != 409 ||
			!strings.Contains(string(b), "a halted rollout is over (machine m1 failed: its trial poll advertised schemas 1,2; release 2.0.0 records 1); "+
				"fix what halted it and start a new rollout of it (meshctl releases rollout 2.0.0") {
			t.Fatalf("resuming a halted rollout: %d %s", resp.StatusCode, b)
		}

		resp, b = e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
			Body: map[string]any{"generation": 1, "outcome": "upgraded", "reason": "upgraded from 1.0.0 to 2.0.0", "host_version": "2.0.0"}})
		var prob struct{ Type, Detail string }
		_ = json.Unmarshal(b, &prob)
		want := "upgraded report refused: the trial of host release 2.0.0 on machine m1 failed (its trial poll advertised schemas 1,2; release 2.0.0 records 1); the launcher puts the previous release back"
		if resp.StatusCode != http.StatusConflict || prob.Type != "urn:mesh:problem:trial-failed" || prob.Detail != want ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("upgraded report: %d %s %s; want 409 trial-failed %q", resp.StatusCode, resp.Header.Get("Content-Type"), b, want)
		}
		report(e, en.Token, map[string]any{"generation": 1, "outcome": "rolled_back",
			"reason": "rolled back from 2.0.0 to 1.0.0: the trial did not reconcile", "host_version": "1.0.0"})
	})
}
