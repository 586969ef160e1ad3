package api_test

import (
	"fmt"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestReports_MustNameTheirSend: a report that names no send used to make
// a machine current at any generation it claimed ({"send": "",
// "generation": 1000, "outcome": "applied"} → current, applied 1000), and
// hid the host's later real refusal. Now only a report tied to this
// machine's send of its generation moves anything.
func TestReports_MustNameTheirSend(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		other := e.Enroll("m2")
		p := doPoll(e, en.Token, 0, "5s")
		if p.status != 200 || p.send == "" {
			t.Fatalf("first poll: %d", p.status)
		}
		machine := func() (applied, finished int64, outcome string) {
			var m struct {
				AppliedGeneration int64  `json:"applied_generation"`
				FinishedGen       int64  `json:"finished_generation"`
				LastOutcome       string `json:"last_outcome"`
			}
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
			return m.AppliedGeneration, m.FinishedGen, m.LastOutcome
		}

		t.Run("NoSendMovesNothing", func(t *testing.T) {
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
				Body: map[string]any{"send": "", "generation": 1000, "outcome": "applied"}}, 201, nil)
			if a, f, _ := machine(); a != 0 || f != 0 {
				t.Fatalf("a report naming no send moved the machine to applied %d, finished %d", a, f)
			}
		})
		t.Run("WrongGenerationIsConflict", func(t *testing.T) {
			resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
				Body: map[string]any{"send": p.send, "generation": 7, "outcome": "applied"}})
			if resp.StatusCode != 409 || !strings.Contains(string(body), "carried generation 1, not 7") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
		t.Run("AnotherMachinesSendIsForbidden", func(t *testing.T) {
			resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: other.Token,
				Body: map[string]any{"send": p.send, "generation": 1, "outcome": "applied"}})
			if resp.StatusCode != 403 {
				t.Fatalf("%d", resp.StatusCode)
			}
		})
		t.Run("UnknownSendIsInvalid", func(t *testing.T) {
			resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
				Body: map[string]any{"send": "no-such-send", "generation": 1, "outcome": "applied"}})
			if resp.StatusCode != 400 || !strings.Contains(string(body), "no send no-such-send") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
		t.Run("GenerationRequired", func(t *testing.T) {
			resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
				Body: map[string]any{"send": p.send, "outcome": "applied"}})
			if resp.StatusCode != 400 || !strings.Contains(string(body), "generation") {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
		if a, f, _ := machine(); a != 0 || f != 0 {
			t.Fatalf("refused reports moved the machine: applied %d, finished %d", a, f)
		}
		t.Run("TheRealRefusalShows", func(t *testing.T) {
			report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "refused", "reason": "escape: /x"})
			if _, f, o := machine(); f != 1 || o != "refused" {
				t.Fatalf("the host's real refusal: finished %d, outcome %q", f, o)
			}
		})
	})
}

// TestReports_WithoutASendAreOnTheRecordSparsely: every report naming no
// send wrote an audit row of its own: a host within its report limits (60
// at once, then one a second) wrote ~86,000 a day. They are on the record
// at most a row a minute for a machine now, as a host's other noise is.
func TestReports_WithoutASendAreOnTheRecordSparsely(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		for i := range 20 {
			resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
				Body: map[string]any{"generation": 1, "outcome": "refused", "reason": fmt.Sprintf("attempt %d", i)}})
			if resp.StatusCode != 201 {
				t.Fatalf("report %d without a send: %d %s", i, resp.StatusCode, b)
			}
		}
		var page struct {
			Items []struct{ Action string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=machine/m1&limit=500", Token: e.Admin}, 200, &page)
		n := 0
		for _, ev := range page.Items {
			if ev.Action == "report-without-send" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("20 reports without a send: %d report-without-send rows, want 1", n)
		}
	})
}
