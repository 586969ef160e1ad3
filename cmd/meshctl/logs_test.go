package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_Logs: `meshctl logs` prints the lines a host shipped, the
// header with why and when on stderr for one service (stdout holds only
// the lines), every service under headers without one, the API's JSON
// with -o json, and the controller's problem for a bad tail or a service
// that shipped nothing.
func TestMeshctl_Logs(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	en := e.Enroll("m1")
	resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token,
		Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}})
	send := resp.Header.Get("X-Mesh-Send")
	if resp.StatusCode != 200 || send == "" {
		t.Fatalf("poll: %d", resp.StatusCode)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: map[string]any{
		"send": send, "generation": 1, "outcome": "checked", "logs": []map[string]any{
			{"resource": "web.service", "why": "restarted", "lines": []string{"starting", "bind: address already in use"}},
			{"resource": "web.worker", "why": "unhealthy", "lines": []string{"w1"}, "truncated": true}}}}, 201, nil)

	meshctl := asAdmin(t, e)

	out, errOut, code := meshctl("logs", "m1", "web.service")
	if code != 0 || out != "starting\nbind: address already in use\n" ||
		!strings.Contains(errOut, "web.service: restarted, shipped ") || !strings.Contains(errOut, "generation 1") {
		t.Fatalf("one service: exit %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = meshctl("logs", "m1", "web.service", "--tail", "1")
	if code != 0 || out != "bind: address already in use\n" {
		t.Fatalf("--tail 1: exit %d\n%s", code, out)
	}
	out, _, code = meshctl("logs", "m1")
	if code != 0 || !strings.Contains(out, "==> web.service: restarted") || !strings.Contains(out, "==> web.worker: unhealthy") ||
		!strings.Contains(out, "older lines left out <==\nw1\n") {
		t.Fatalf("every service: exit %d\n%s", code, out)
	}
	out, _, code = meshctl("logs", "m1", "web.service", "-o", "json")
	var l struct {
		Machine string
		Items   []struct {
			Resource  string
			Why       string
			ShippedAt string `json:"shipped_at"`
			Lines     []string
		}
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || code != 0 || l.Machine != "m1" || len(l.Items) != 1 ||
		len(l.Items[0].Lines) != 2 || l.Items[0].Why != "restarted" || l.Items[0].ShippedAt == "" {
		t.Fatalf("-o json: exit %d %v\n%s", code, err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "m1", "web.nothing"}, "machine m1 has shipped no lines of web.nothing"},
		{[]string{"logs", "m1", "web.service", "--tail", "0"}, "tail: a number of lines from 1 to 100"},
		{[]string{"logs", "nobody", "web.service"}, "meshctl: machine nobody: not found\n"},
	} {
		if _, errOut, code := meshctl(tc.args...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("meshctl %v: exit %d, %s", tc.args, code, errOut)
		}
	}
}

// TestMeshctl_EscapesReachNoTerminal: what a host reports (a refusal's
// reason) is printed with its control characters escaped: a reason holding
// terminal escapes could set the clipboard or hide text on the operator's
// terminal.
func TestMeshctl_EscapesReachNoTerminal(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	en := e.Enroll("m1")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token, Body: map[string]any{
		"generation": 0, "outcome": "refused", "reason": "ok\x1b[2K\x1b]52;c;ZWNobyBwd25lZA==\x07 done"}}, 201, nil)
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("MESH_CONTROLLER", e.URL)
	t.Setenv("MESH_TOKEN", e.Admin)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"machines", "show", "m1"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") || !strings.Contains(out.String(), `ok\x1b[2K\x1b]52;c;ZWNobyBwd25lZA==`) {
		t.Fatalf("printed %q, want the reason with its escapes written out", out.String())
	}
	// The controller escapes what it keeps of a host's words; meshctl
	// escapes whatever reaches a table, from any controller.
	for in, want := range map[string]string{"ok": "ok", "a\x1b]0;t\x07b": `a\x1b]0;t\ab`, "tab\there": `tab\there`, "naïve": "naïve"} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMeshctl_MachinesInAState: `machines ls --state behind` lists the
// machines behind, each with why, and no other.
func TestMeshctl_MachinesInAState(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1") // never polled: behind
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("MESH_CONTROLLER", e.URL)
	t.Setenv("MESH_TOKEN", e.Admin)
	ls := func(state string) string {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"machines", "ls", "--state", state}, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("ls --state %s: exit %d: %s", state, code, errOut.String())
		}
		return out.String()
	}
	if out := ls("behind"); !strings.Contains(out, "WHY") || !strings.Contains(out, "m1") || !strings.Contains(out, "generation 1 not sent yet: its host has never polled (enrolled ") || !strings.Contains(out, "(since ") {
		t.Fatalf("behind:\n%s", out)
	}
	if out := ls("current"); strings.Contains(out, "m1") {
		t.Fatalf("current lists m1:\n%s", out)
	}
}
