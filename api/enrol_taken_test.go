package api_test

import (
	"testing"

	"mesh/controller/ctltest"
)

// TestEnrol_TakenNameRefusalIsAudited: a join token spent on the name of a
// machine that is enrolled already is refused (409) and the token left
// unspent — someone holding a valid join token tried to become an
// enrolled machine, or an operator re-enrolled a machine without deleting
// it first and its host now stops at enrolment. Either is a refusal an
// operator must find in the audit log, as a used or revoked token's is.
func TestEnrol_TakenNameRefusalIsAudited(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		if st, b := enrolWith(e, e.JoinToken(), "m1"); st != 201 {
			t.Fatalf("enrol: %d %s", st, b)
		}
		if st, b := enrolWith(e, e.JoinToken(), "m1"); st != 409 {
			t.Fatalf("enrol under a taken name: %d %s, want 409", st, b)
		}
		for _, ev := range audited(e) {
			if ev.Target == "machine/m1" && ev.Action != "enroll" {
				return
			}
		}
		t.Fatalf("the refused enrolment under m1's name is not in the audit log: %+v", audited(e))
	})
}
