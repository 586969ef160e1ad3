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

// TestEnroll_AgainKeepsOrForgetsGenerationsByName: enrolled again under
// its name, a host keeps what it finished (the store starts the name past
// its earlier machine, so the earlier machine's declarations stay older);
// under another name the generations were another machine's and are
// forgotten (the new machine starts at 1: kept, it would have been held
// in conflict or behind). Either way the earlier machine's send is
// forgotten (reports naming it were refused), and what the host manages is
// kept. Back under a name it had before, it takes up what it finished then.
func TestEnroll_AgainKeepsOrForgetsGenerationsByName(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	dir := filepath.Join(t.TempDir(), "state")
	enrol := func(name string) {
		t.Helper()
		if _, err := agent.Enroll(context.Background(), agent.Enrolment{Controllers: []string{e.URL}, JoinToken: e.JoinToken(), Name: name, StateDir: dir}); err != nil {
			t.Fatal(err)
		}
	}
	again := func(name string) *agent.State {
		t.Helper()
		if err := os.Remove(filepath.Join(dir, "host.json")); err != nil {
			t.Fatal(err)
		}
		enrol(name)
		st, err := agent.LoadState(dir)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	enrol("m1")
	worked := func(st *agent.State) {
		st.Finished, st.Applied, st.AppliedDigest, st.AppliedSend = 3, 3, "sha256:x", "s-3"
		st.Resources = map[string]*agent.Managed{"web.conf": {Kind: "file", Module: "web", Path: "/etc/web.conf", Digest: "sha256:y"}}
		if err := st.Save(dir); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := agent.LoadState(dir)
	worked(st)
	e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m1", Token: e.Admin}, 204, nil)

	st = again("m1")
	if st.Finished != 3 || st.Applied != 3 || st.AppliedSend != "" || st.Machine != "m1" || st.Resources["web.conf"] == nil {
		t.Fatalf("enrolled again as m1: %+v; want generation 3 kept, no send, web.conf managed", st)
	}
	worked(st)
	e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m1", Token: e.Admin}, 204, nil)

	st = again("web-7")
	if st.Finished != 0 || st.Applied != 0 || st.AppliedSend != "" || st.Machine != "web-7" || st.Resources["web.conf"] == nil {
		t.Fatalf("enrolled again as web-7: %+v; want no generations, no send, web.conf managed", st)
	}

	// Back under m1: the generation finished as m1 is taken up again, so
	// the earlier m1's declarations, replayed, stay older.
	e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/web-7", Token: e.Admin}, 204, nil)
	st = again("m1")
	if st.Finished != 3 || st.Machine != "m1" || st.Resources["web.conf"] == nil {
		t.Fatalf("enrolled again as m1 after web-7: %+v; want generation 3 finished, as m1 left it", st)
	}
}
