package main

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_PushToARevokedMachineSaysSo: a push to a revoked machine is
// refused, saying why; it printed "m4: generation 8 (push)" and exit 0,
// where nothing is ever sent to a revoked machine.
func TestMeshctl_PushToARevokedMachineSaysSo(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m4")
	meshctl := asAdmin(t, e)
	if out, errOut, code := meshctl("machines", "revoke", "m4", "--reason", "disk sold"); code != 0 {
		t.Fatalf("revoke: %d %s %s", code, out, errOut)
	}
	out, errOut, code := meshctl("push", "m4")
	if code == 0 || !strings.Contains(out+errOut, "machine m4 is revoked (disk sold): nothing is sent to it") {
		t.Fatalf("push to a revoked machine: exit 0, said only %q (nothing will be sent to it)", strings.TrimSpace(out+errOut))
	}
}

// TestMeshctl_HealthOfAMachineThatAppliedNothing: a machine whose host has
// applied nothing said "Health: none (no checks declared)" though its
// module declares a check: none ran yet.
func TestMeshctl_HealthOfAMachineThatAppliedNothing(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m6")
	meshctl := asAdmin(t, e)
	out, errOut, code := meshctl("machines", "show", "m6")
	if code != 0 || !strings.Contains(out, "none yet: its host has applied nothing, so no check has run") {
		t.Fatalf("machines show of a machine that applied nothing: %d %s %s", code, out, errOut)
	}
}
