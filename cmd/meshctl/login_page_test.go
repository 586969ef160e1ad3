package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// behindLoginPage points meshctl at what sits in front of a controller
// whose SSO session has expired (oauth2-proxy and the like): every request
// is redirected (302) to a login page served 200 text/html.
func behindLoginPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/login" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, "<html><body>Sign in to continue</body></html>")
			return
		}
		http.Redirect(w, r, "/login?rd="+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("MESH_CONTROLLER", srv.URL)
	t.Setenv("MESH_TOKEN", "sometoken")
}

// runCaught runs meshctl in process, a panic turned into exit -1.
func runCaught(stdin string, args ...string) (out, errOut string, code int) {
	var o, e bytes.Buffer
	defer func() {
		if p := recover(); p != nil {
			out, errOut, code = o.String(), e.String()+fmt.Sprintf("PANIC: %v", p), -1
		}
	}()
	code = run(context.Background(), args, strings.NewReader(stdin), &o, &e)
	return o.String(), e.String(), code
}

// Behind a proxy whose login page answers every request (its redirect
// followed, a POST turned into a GET of the page, 200), meshctl said a
// machine was revoked and a build yanked, exit 0, though nothing reached
// the controller; other commands crashed on the answer they could not
// read, or said only Go's JSON decoder's words. Each says what answered.
func TestMeshctl_ALoginPageIsNotTakenForTheController(t *testing.T) {
	behindLoginPage(t)
	for _, args := range [][]string{
		{"machines", "revoke", "m1", "--reason", "disk sold"},
		{"builds", "yank", "web", "17", "--reason", "leaks fds"},
		{"login", "--user", "admin", "--password-stdin"},
		{"machines", "show", "m1"},
		{"machines", "resolve", "m1"},
		{"push", "m1"},
		{"assign", "m1", "web"},
		{"machines", "label", "m1", "role=web"},
		{"machines", "vars", "m1", "port=1"},
		{"plans", "watch", "1"},
		{"releases", "watch", "1.5.0"},
		{"releases", "pause", "1.5.0"},
		{"tokens", "revoke", "at-abc"},
		{"modules", "current", "web", "3"},
		{"machines", "ls"},
		{"plans", "pause", "1"},
		{"machines", "declaration", "m1"},
	} {
		out, errOut, code := runCaught("pw\n", args...)
		if code != 1 || strings.Contains(errOut, "invalid character") || !strings.Contains(errOut, "redirect") {
			t.Errorf("meshctl %s behind a login page: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// A web server's catch-all page at the URL (no redirect): the same.
func TestMeshctl_AnotherServersPageIsNotTakenForTheController(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>index</html>")
	}))
	defer srv.Close()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("MESH_CONTROLLER", srv.URL)
	t.Setenv("MESH_TOKEN", "sometoken")
	for _, args := range [][]string{{"machines", "revoke", "m1", "--reason", "disk sold"}, {"machines", "show", "m1"}, {"machines", "ls"}} {
		out, errOut, code := runCaught("", args...)
		if code != 1 || !strings.Contains(errOut, "not the controller API's JSON") {
			t.Errorf("meshctl %s at another server: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
	}
}
