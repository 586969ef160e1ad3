package api_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestMachines_StateWordsAsTheDashboard: the API says a machine's state
// whole, as the dashboard does (models.SayState): a behind machine not
// sent its generation yet, then sent it and awaiting its host's report —
// the distinction the README promises, which meshctl could not make from
// the API (it said "not applied yet" of both).
func TestMachines_StateWordsAsTheDashboard(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		send, gen := sendPoll(t, e, en.Token, 0)
		report(e, en.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		type words struct {
			State      string `json:"state"`
			StateWords *struct {
				Badge string `json:"badge"`
				Since string `json:"since"`
			} `json:"state_words"`
		}
		read := func() (one words, inList words) {
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &one)
			var l struct{ Items []words }
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines?state=behind", Token: e.Admin}, 200, &l)
			if len(l.Items) == 1 {
				inList = l.Items[0]
			}
			return one, inList
		}
		if one, _ := read(); one.State != "current" || one.StateWords == nil || !strings.HasPrefix(one.StateWords.Badge, "current at generation") {
			t.Fatalf("current: %+v", one)
		}
		firstVariables(e, "m1")
		for _, w := range func() []words { a, b := read(); return []words{a, b} }() {
			if w.State != "behind" || w.StateWords == nil || !strings.Contains(w.StateWords.Since, "not sent yet") {
				t.Fatalf("behind, not sent: %s %+v", w.State, *w.StateWords)
			}
		}
		sendPoll(t, e, en.Token, gen)
		for _, w := range func() []words { a, b := read(); return []words{a, b} }() {
			if w.State != "behind" || w.StateWords == nil || !strings.Contains(w.StateWords.Since, "no report yet") ||
				!strings.Contains(w.StateWords.Since, "sent ") || !strings.HasPrefix(w.StateWords.Badge, "behind by 1 generation") {
				t.Fatalf("behind, sent: %+v", *w.StateWords)
			}
		}
	})
}

// machineState reads a machine's state and its words from the API.
type machineState struct {
	State             string                         `json:"state"`
	Generation        int64                          `json:"generation"`
	AppliedGeneration int64                          `json:"applied_generation"`
	LastOutcome       string                         `json:"last_outcome"`
	StateWords        *struct{ Badge, Since string } `json:"state_words"`
}

func readState(e *ctltest.Env, name string) machineState {
	var m machineState
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/" + name, Token: e.Admin}, 200, &m)
	return m
}

// TestMachines_ALateFailedAttemptDoesNotMakeARejectedMachineCurrent: a
// host failed generation 2 once, then gave up on it (rejected); the first
// attempt's report, retried after a timeout on a slow instance, was
// committed last, and the machine read "current … applied" — its host had
// applied 1 and rejected 2.
func TestMachines_ALateFailedAttemptDoesNotMakeARejectedMachineCurrent(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		send, gen := sendPoll(t, e, en.Token, 0)
		report(e, en.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		firstVariables(e, "m1")
		send2, gen2 := sendPoll(t, e, en.Token, gen)
		failed := map[string]any{"send": send2, "generation": gen2, "outcome": "failed", "reason": "port in use", "attempt": 1}
		report(e, en.Token, failed)
		report(e, en.Token, map[string]any{"send": send2, "generation": gen2, "outcome": "rejected", "reason": "failed 3 attempts; last: port in use", "attempt": 3})
		if m := readState(e, "m1"); m.State != "rejected" {
			t.Fatalf("after the rejection: %+v", m)
		}
		report(e, en.Token, failed) // the first attempt's, committed late
		if m := readState(e, "m1"); m.State != "rejected" {
			t.Fatalf("machine reads %q (%+v) at generation %d; its host applied %d and rejected %d", m.State, m.StateWords, m.Generation, m.AppliedGeneration, gen2)
		}
		var list struct {
			Items []machineState `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines?state=current", Token: e.Admin}, 200, &list)
		if len(list.Items) != 0 {
			t.Fatalf("listed as current: %+v", list.Items)
		}
	})
}

// TestMachines_AFailingReapplyOfItsGenerationIsNotCurrent: a host that
// lost its state polled as one that finished nothing, was sent its
// machine's generation again and failed to apply it; the machine read
// "current … applied" while every report since said the host failed.
func TestMachines_AFailingReapplyOfItsGenerationIsNotCurrent(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		send, gen := sendPoll(t, e, en.Token, 0)
		report(e, en.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		firstVariables(e, "m1")
		send2, gen2 := sendPoll(t, e, en.Token, gen)
		report(e, en.Token, map[string]any{"send": send2, "generation": gen2, "outcome": "applied"})
		// Its state lost: it polls as a host that finished nothing.
		send3, gen3 := sendPoll(t, e, en.Token, 0)
		if gen3 != gen2 || send3 == send2 {
			t.Fatalf("sent again: generation %d send %s", gen3, send3)
		}
		report(e, en.Token, map[string]any{"send": send3, "generation": gen3, "outcome": "failed", "reason": "disk full", "attempt": 1})
		m := readState(e, "m1")
		if m.State != "failed" || m.StateWords == nil || !strings.Contains(m.StateWords.Badge, "disk full") {
			t.Fatalf("machine reads %q (%+v) while its last report is %q: its host failed generation %d", m.State, m.StateWords, m.LastOutcome, gen3)
		}
		var list struct {
			Items []machineState `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines?state=failed", Token: e.Admin}, 200, &list)
		if len(list.Items) != 1 {
			t.Fatalf("listed as failed: %+v", list.Items)
		}
		report(e, en.Token, map[string]any{"send": send3, "generation": gen3, "outcome": "applied"})
		if m := readState(e, "m1"); m.State != "current" {
			t.Fatalf("applied again: %+v", m)
		}
	})
}

// TestMachines_AHostThatPolledAtOnceIsNotSaidNeverPolled: a host enrolled,
// polled at once, applied its first generation and reported it, all
// within a second, as mesh-host does, and was heard from no more. Its
// machine's words said its host "never polled", for good, though a send
// went to it and it reported applying it.
func TestMachines_AHostThatPolledAtOnceIsNotSaidNeverPolled(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		send, gen := sendPoll(t, e, en.Token, 0)
		report(e, en.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		firstVariables(e, "m1")
		m := readState(e, "m1")
		if m.StateWords == nil || strings.Contains(m.StateWords.Since, "never polled") {
			t.Fatalf("%s: %+v — its host polled (send %s) and reported applying generation %d", m.State, m.StateWords, send, gen)
		}
	})
}

// TestMachines_ALateAppliedCopyDoesNotHideAFailedResend: a host applied
// generation 2; its state lost, it was sent generation 2 again and failed
// it, and the machine read failed. A copy of the earlier send's applied
// report, committed last (a retry after a timeout on a slow instance),
// made it read current again.
func TestMachines_ALateAppliedCopyDoesNotHideAFailedResend(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		send, gen := sendPoll(t, e, en.Token, 0)
		report(e, en.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		firstVariables(e, "m1")
		send2, gen2 := sendPoll(t, e, en.Token, gen)
		applied := map[string]any{"send": send2, "generation": gen2, "outcome": "applied"}
		report(e, en.Token, applied)
		send3, gen3 := sendPoll(t, e, en.Token, 0) // its state lost
		if gen3 != gen2 || send3 == send2 {
			t.Fatalf("sent again: generation %d send %s", gen3, send3)
		}
		report(e, en.Token, map[string]any{"send": send3, "generation": gen3, "outcome": "failed", "reason": "disk full", "attempt": 1})
		if m := readState(e, "m1"); m.State != "failed" {
			t.Fatalf("after the failed resend: %+v", m)
		}
		report(e, en.Token, applied) // the earlier send's, committed late
		if m := readState(e, "m1"); m.State != "failed" {
			t.Errorf("machine reads %q (%+v, last outcome %q): its host's latest attempt (send %s) failed; the applied word is of the earlier send %s",
				m.State, m.StateWords, m.LastOutcome, send3, send2)
		}
	})
}

// TestMachines_ALateFailedAttemptAfterTheUpgradeTo0040IsStillLate: a
// machine whose last word came before migration 0040 keeps no send of it
// (last_outcome_send ”); a late copy of a failed attempt, committed after
// the upgrade, was then taken as the host's word, and a rejected machine
// read failed.
func TestMachines_ALateFailedAttemptAfterTheUpgradeTo0040IsStillLate(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		send, gen := sendPoll(t, e, en.Token, 0)
		report(e, en.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		firstVariables(e, "m1")
		send2, gen2 := sendPoll(t, e, en.Token, gen)
		failed := map[string]any{"send": send2, "generation": gen2, "outcome": "failed", "reason": "port in use", "attempt": 1}
		report(e, en.Token, failed)
		report(e, en.Token, map[string]any{"send": send2, "generation": gen2, "outcome": "rejected", "reason": "failed 3 attempts; last: port in use", "attempt": 3})
		// What migration 0040 leaves on a machine whose last word came
		// before it.
		if err := e.Ctl.Store.DB().Exec("UPDATE machines SET last_outcome_send = ''").Error; err != nil {
			t.Fatal(err)
		}
		report(e, en.Token, failed) // the first attempt's, committed late
		if m := readState(e, "m1"); m.State != "rejected" {
			t.Errorf("machine reads %q (%+v); its host applied %d and rejected %d", m.State, m.StateWords, m.AppliedGeneration, gen2)
		}
	})
}
