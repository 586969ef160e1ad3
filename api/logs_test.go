package api_test

import (
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
)

type logList struct {
	Machine string `json:"machine"`
	Items   []struct {
		Resource   string    `json:"resource"`
		Why        string    `json:"why"`
		Lines      []string  `json:"lines"`
		Truncated  bool      `json:"truncated"`
		Send       string    `json:"send"`
		Generation int64     `json:"generation"`
		ShippedAt  time.Time `json:"shipped_at"`
	} `json:"items"`
}

// TestLogs_LatestShippedLines: the lines a host's report carried are
// answered with when they were shipped, cut to the tail asked for; a
// resource that shipped none, a bad tail or resource, and lines out of
// bounds are clear problems, and a refused report stores nothing.
func TestLogs_LatestShippedLines(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := doPoll(e, en.Token, 0, "5s")
		if p.status != 200 || p.send == "" {
			t.Fatalf("first poll: %d", p.status)
		}
		before := time.Now().Add(-time.Second)
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied",
			"running": map[string]any{"web": map[string]any{"build": 1}},
			"logs": []map[string]any{
				{"resource": "web.service", "why": "restarted", "lines": []string{"starting", "listen tcp :80: bind: address already in use"}},
				{"resource": "web.worker", "why": "unhealthy", "lines": []string{"a", "b", "c"}, "truncated": true},
			}})

		var l logList
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs?resource=web.service", Token: e.Admin}, 200, &l)
		if l.Machine != "m1" || len(l.Items) != 1 {
			t.Fatalf("%+v", l)
		}
		it := l.Items[0]
		if it.Resource != "web.service" || it.Why != "restarted" || it.Send != p.send || it.Generation != 1 ||
			strings.Join(it.Lines, "|") != "starting|listen tcp :80: bind: address already in use" || it.Truncated ||
			it.ShippedAt.Before(before) || it.ShippedAt.After(time.Now().Add(time.Second)) {
			t.Fatalf("web.service: %+v", it)
		}

		t.Run("Tail", func(t *testing.T) {
			var l logList
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs?resource=web.service&tail=1", Token: e.Admin}, 200, &l)
			if len(l.Items) != 1 || strings.Join(l.Items[0].Lines, "|") != "listen tcp :80: bind: address already in use" || !l.Items[0].Truncated {
				t.Fatalf("tail 1: %+v", l)
			}
		})
		t.Run("EveryResource", func(t *testing.T) {
			var l logList
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs?tail=2", Token: e.Admin}, 200, &l)
			if len(l.Items) != 2 || l.Items[1].Resource != "web.worker" || strings.Join(l.Items[1].Lines, "|") != "b|c" || !l.Items[1].Truncated {
				t.Fatalf("every resource: %+v", l)
			}
		})
		for _, tc := range []struct {
			name, query string
			status      int
			detail      string
		}{
			{"NoneShipped", "?resource=web.other", 404, "machine m1 has shipped no lines of web.other"},
			{"ModuleNotRun", "?resource=db.service", 404, "its host has not reported running its module (its last applied report names web)"},
			// A module's name may hold dots: web.v2.service may be web's
			// resource v2.service, so only what is known is said.
			{"ModuleNameMayHoldDots", "?resource=web.v2.service", 404, "has shipped no lines of web.v2.service (a host ships"},
			{"NotAResource", "?resource=../etc", 400, "resource"},
			{"TailZero", "?resource=web.service&tail=0", 400, "tail"},
			{"TailTooMany", "?resource=web.service&tail=101", 400, "a number of lines from 1 to 100"},
			{"TailNotANumber", "?resource=web.service&tail=ten", 400, `not \"ten\"`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs" + tc.query, Token: e.Admin})
				if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), tc.detail) {
					t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
				}
			})
		}
		t.Run("UnknownMachine", func(t *testing.T) {
			resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/nobody/logs?resource=web.service", Token: e.Admin})
			if resp.StatusCode != 404 {
				t.Fatalf("%d", resp.StatusCode)
			}
		})
		t.Run("OutOfBoundsRefused", func(t *testing.T) {
			for _, lines := range [][]string{{"\x1b[2J"}, {"a\nb"}, make([]string, 101)} {
				resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
					Body: map[string]any{"send": p.send, "generation": 1, "outcome": "checked",
						"logs": []map[string]any{{"resource": "web.service", "why": "failed", "lines": lines}}}})
				if resp.StatusCode != 400 || !strings.Contains(string(b), "logs[0].lines") {
					t.Fatalf("%d %s", resp.StatusCode, b)
				}
			}
			var l logList
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs?resource=web.service", Token: e.Admin}, 200, &l)
			if l.Items[0].Why != "restarted" {
				t.Fatalf("a refused report changed the lines: %+v", l.Items[0])
			}
		})
	})
}
