package web_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMachinePage_HostWordsCarryNoInvisibleCharacters: what a host says is
// hostile input. Its version was refused with a bidirectional control but
// taken with a zero-width one: "1.6.0\u200b" showed as another machine's
// "1.6.0" while every comparison took it as another version. Its shipped
// log lines were kept with a bidirectional override and shown as they
// came: "\u202edeliaf :kcehc" read "check: failed".
func TestMachinePage_HostWordsCarryNoInvisibleCharacters(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.AddUser("vera", "viewer")
	vw := newBrowser(t, e.URL)
	vw.login("vera", "password-of-vera")
	report := func(name, version string, logs []string) int {
		en := e.Enroll(name)
		resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token,
			Header: map[string]string{"X-Mesh-Host-Version": "1.6.0", "X-Mesh-Schema": "1"}})
		body := map[string]any{"send": resp.Header.Get("X-Mesh-Send"), "generation": 1, "outcome": "applied", "attempt": 1, "host_version": version}
		if logs != nil {
			body["outcome"] = "checked"
			body["logs"] = []map[string]any{{"resource": "web.service", "why": "restarted", "lines": logs}}
		}
		r, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: body})
		return r.StatusCode
	}
	if st := report("m2", "1.6.0\u200b", nil); st != 400 {
		t.Errorf("a report saying host version 1.6.0 with a zero-width space: %d, want 400", st)
	}
	if st := report("m3", "1.6.0", []string{"\u202edeliaf :kcehc", "listening on :8080"}); st != 201 {
		t.Fatalf("a report with a line holding a right-to-left override: %d, want it kept (escaped)", st)
	}
	for _, p := range []string{"/", "/machines/m3", "/ui/machines/m3/status"} {
		if _, body := vw.get(p); strings.ContainsAny(body, "\u202e\u200b") {
			t.Errorf("%s shows a host's words with an invisible character as is", p)
		}
	}
	if _, body := vw.get("/machines/m3"); !strings.Contains(body, `\u202edeliaf :kcehc`) {
		t.Errorf("the line with the override is not shown escaped")
	}
}
