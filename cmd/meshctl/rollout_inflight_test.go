package main

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestMeshctl_RolloutBadMaxInFlightStartsNothing: --max-in-flight is a
// number of machines from 1 up (the API refuses max_in_flight < 1 with
// 400). meshctl dropped a value under 1 as "not given" and started a
// rollout with the controller's default, exit 0; it now sends what was
// typed, and the refusal comes back with nothing started.
func TestMeshctl_RolloutBadMaxInFlightStartsNothing(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1")
	e.Enroll("m2")
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}
	meshctl := asAdmin(t, e)
	out, errOut, code := meshctl("releases", "rollout", "1.5.0", "--max-in-flight", "-5")
	if code == 0 || !strings.Contains(errOut, "max") {
		t.Errorf("releases rollout --max-in-flight -5: exit %d, want non-zero and an error naming --max-in-flight\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// Nothing changed on the controller: no rollout of 1.5.0.
	if resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases/1.5.0/rollout", Token: e.Admin}); resp.StatusCode != 404 {
		t.Errorf("after a refused --max-in-flight -5, GET rollout: %d %s; want 404 (no rollout started)", resp.StatusCode, b)
	}
}

// TestMeshctl_NumbersThatMeanNothingAreRefused: plans ls --limit -1 asked
// the controller for pages of no size, one request a plan, and a watch's
// --interval of 0 polled the controller in a tight loop.
func TestMeshctl_NumbersThatMeanNothingAreRefused(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	meshctl := asAdmin(t, e)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plans", "ls", "--limit", "-1"}, "--limit"},
		{[]string{"plans", "watch", "1", "--interval", "0s"}, "--interval"},
		{[]string{"releases", "watch", "1.5.0", "--interval", "-1s"}, "--interval"},
	} {
		if out, errOut, code := meshctl(tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want a refusal naming %s\nstdout:\n%s\nstderr:\n%s", tc.args, code, tc.want, out, errOut)
		}
	}
}

// TestMeshctl_UploadOfADirectoryBlamesTheDirectory: releases upload of a
// directory failed inside the upload's stream, as "talking to the
// controller: … is a directory".
func TestMeshctl_UploadOfADirectoryBlamesTheDirectory(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	meshctl := asAdmin(t, e)
	dir := t.TempDir()
	out, errOut, code := meshctl("releases", "upload", "9.9.9", dir, "--schemas", "1,2", "--os", "linux", "--arch", "amd64")
	if code == 0 || !strings.Contains(errOut, dir+": not a file") || strings.Contains(errOut, "controller") {
		t.Errorf("releases upload of a directory: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
