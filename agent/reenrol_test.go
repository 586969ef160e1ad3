package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/store"
)

// TestEnroll_AgainStartsItsGenerationsAfresh: a machine enrolled again
// (its earlier machine revoked or deleted) is a new machine whose
// generations start at 1; the state's generations of the earlier one
// would be the poll's If-None-Match, and the new machine's first
// declaration never sent (it stayed behind for good). The resources the
// host manages are kept.
func TestEnroll_AgainStartsItsGenerationsAfresh(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	dir := filepath.Join(t.TempDir(), "state")
	enrol := func() {
		t.Helper()
		if _, err := agent.Enroll(context.Background(), agent.Enrolment{Controllers: []string{e.URL}, JoinToken: e.JoinToken(), Name: "m1", StateDir: dir}); err != nil {
			t.Fatal(err)
		}
	}
	enrol()
	st := &agent.State{Finished: 3, Applied: 3, AppliedDigest: "sha256:x", AppliedSend: "s",
		Resources: map[string]*agent.Managed{"web.conf": {Kind: "file", Module: "web", Path: "/etc/web.conf", Digest: "sha256:y"}}}
	if err := st.Save(dir); err != nil {
		t.Fatal(err)
	}
	e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m1", Token: e.Admin}, 204, nil)
	if err := os.Remove(filepath.Join(dir, "host.json")); err != nil { // as the refusal to enrol again says
		t.Fatal(err)
	}
	enrol()
	got, err := agent.LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Finished != 0 || got.Applied != 0 || got.AppliedSend != "" || got.Resources["web.conf"] == nil {
		t.Fatalf("state after enrolling again: %+v, want no generations and web.conf still managed", got)
	}
}
