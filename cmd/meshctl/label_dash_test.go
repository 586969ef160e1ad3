package main

import (
	"strings"
	"testing"

	"mesh/client"
	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_LabelBareDashIsBadInput: "-" is neither KEY=VALUE nor KEY-
// (it names no key). meshctl took it as removing the label of no name,
// wrote the labels and exited 0; it refuses it now, as it refuses "=v" or
// "k=", and writes nothing.
func TestMeshctl_LabelBareDashIsBadInput(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1")
	meshctl := asAdmin(t, e)
	out, errOut, code := meshctl("machines", "label", "m1", "-")
	if code == 0 || !strings.Contains(errOut, "KEY") {
		t.Errorf("machines label m1 -: exit %d, want non-zero and the KEY=VALUE / KEY- words\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var ev struct{ Items []client.AuditEvent }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=machine/m1", Token: e.Admin}, 200, &ev)
	for _, x := range ev.Items {
		if strings.Contains(x.Action, "label") {
			t.Errorf("the bad argument was written: audit %s %s %s", x.Action, x.Target, x.Detail)
		}
	}
}
