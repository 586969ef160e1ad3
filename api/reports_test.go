package api_test

import (
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
