package api_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestMachines_RevokedSaysWhenAndByWhom: every other state word comes with
// when; a revoked machine said only "revoked: disk sold", not when, not by
// whom. It says both, and the API carries revoked_at and revoked_by.
func TestMachines_RevokedSaysWhenAndByWhom(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		send, gen := sendPoll(t, e, en.Token, 0)
		report(e, en.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/revoke", Token: e.Admin, Body: map[string]any{"reason": "disk sold"}}, 200, nil)
		var m map[string]any
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		words, _ := m["state_words"].(map[string]any)
		said := ""
		if words != nil {
			said, _ = words["badge"].(string)
			s, _ := words["since"].(string)
			said += " " + s
		}
		if m["state"] != "revoked" || m["revoked_at"] == nil || m["revoked_by"] != "user:admin" ||
			!strings.Contains(said, "revoked: disk sold revoked ") || !strings.Contains(said, "ago) by user:admin; its token and certificates are refused") {
			t.Fatalf("revoked: state %v, at %v, by %v; words %q", m["state"], m["revoked_at"], m["revoked_by"], said)
		}
	})
}
