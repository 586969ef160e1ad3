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
