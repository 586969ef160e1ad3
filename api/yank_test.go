package api_test

import (
	"fmt"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

const yankManifest = `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "v\n"}]}`

type buildInfo struct {
	Number     int64
	State      string
	YankReason string `json:"yank_reason"`
	YankedBy   string `json:"yanked_by"`
}

func TestBuilds_Yank(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "app"}}, 201, nil)
		for i := 1; i <= 2; i++ {
			if resp, b := e.Upload(e.Admin, "app", yankManifest, nil, ""); resp.StatusCode != 201 {
				t.Fatalf("upload %d: %d %s", i, resp.StatusCode, b)
			}
		}
		e.Enroll("m1")
		// m1 runs build 2 (pinned); build 3 is current.
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "app", "build": 2}}}}, 200, nil)
		if resp, b := e.Upload(e.Admin, "app", yankManifest, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload 3: %d %s", resp.StatusCode, b)
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/app/current", Token: e.Admin, Body: map[string]any{"build": 3}}, 200, nil)
		gen := e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, nil).Header.Get("ETag")
		op := e.AddUser("olga", "operator")
		viewer := e.AddUser("vic", "viewer")
		yank := func(token string, number int, body any, status int) buildInfo {
			t.Helper()
			var b buildInfo
			e.JSON(ctltest.Request{Method: "POST", Path: fmt.Sprintf("/api/v1/modules/app/builds/%d/yank", number), Token: token, Body: body}, status, &b)
			return b
		}

		t.Run("OK", func(t *testing.T) {
			b := yank(op, 2, map[string]string{"reason": "leaks file handles"}, 200)
			if b.State != "yanked" || b.YankReason != "leaks file handles" || b.YankedBy == "" {
				t.Fatalf("yanked: %+v", b)
			}
			var got buildInfo
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules/app/builds/2", Token: viewer}, 200, &got)
			if got.State != "yanked" || got.YankReason != "leaks file handles" {
				t.Fatalf("read back: %+v", got)
			}
			if !hasAudit(audited(e), "yank-build", "module/app") {
				t.Fatal("yank not audited")
			}
			// The machine that runs it keeps it: no new generation, the pin stays.
			r := e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, nil)
			if r.Header.Get("ETag") != gen {
				t.Fatalf("machine bumped by a yank: ETag %s, was %s", r.Header.Get("ETag"), gen)
			}
			var as struct {
				Assignments []struct {
					Module string
					Build  *int64
				}
			}
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
			if len(as.Assignments) != 1 || as.Assignments[0].Build == nil || *as.Assignments[0].Build != 2 {
				t.Fatalf("assignments after yank: %+v", as)
			}
			// Twice changes nothing.
			if b := yank(op, 2, map[string]string{"reason": "again"}, 200); b.YankReason != "leaks file handles" {
				t.Fatalf("yanked twice: %+v", b)
			}
		})
		t.Run("PlanRefused", func(t *testing.T) {
			var p struct{ State, Reason string }
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/plans", Token: op, Body: map[string]any{"module": "app", "build": 2}}, 201, &p)
			if p.State != "refused" || !strings.Contains(p.Reason, "yanked") || !strings.Contains(p.Reason, "leaks file handles") {
				t.Fatalf("plan for a yanked build: %+v", p)
			}
			var l struct {
				Items []struct {
					Build int64
					State string
				}
			}
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: op}, 200, &l)
			for _, p := range l.Items {
				if p.Build == 2 && (p.State == "running" || p.State == "paused" || p.State == "halted") {
					t.Fatalf("a plan for the yanked build is still %s", p.State)
				}
			}
		})
		t.Run("ErrNeverCurrent", func(t *testing.T) {
			_, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/modules/app/current", Token: op, Body: map[string]any{"build": 2}})
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/app/current", Token: op, Body: map[string]any{"build": 2}}, 409, nil)
			if !strings.Contains(string(b), "yanked") {
				t.Fatalf("current refused without saying why: %s", b)
			}
		})
		t.Run("ErrNoNewPin", func(t *testing.T) {
			e.Enroll("m2")
			_, b := e.Do(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m2/assignments", Token: op,
				Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "app", "build": 2}}}})
			if !strings.Contains(string(b), "yanked") {
				t.Fatalf("pin to a yanked build: %s", b)
			}
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m2/assignments", Token: op,
				Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "app", "build": 2}}}}, 400, nil)
		})
		t.Run("ErrCurrent", func(t *testing.T) {
			yank(op, 3, map[string]string{"reason": "bad"}, 409)
		})
		t.Run("ErrNoReason", func(t *testing.T) {
			yank(op, 1, map[string]string{"reason": "  "}, 400)
			yank(op, 1, map[string]string{}, 400)
		})
		t.Run("ErrNotFound", func(t *testing.T) {
			yank(op, 9, map[string]string{"reason": "bad"}, 404)
		})
		t.Run("ErrViewer", func(t *testing.T) {
			yank(viewer, 1, map[string]string{"reason": "bad"}, 403)
		})
	})
}
