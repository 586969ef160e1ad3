package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"mesh/models"
)

// TestApply_ServiceBecomingAnotherKindIsStopped: a declaration names as a
// file the id a running service had. The service was no longer declared,
// yet step 1 passed it by (its id was still named) and step 2 only wrote
// the file, so its process ran on with nothing left to stop it.
func TestApply_ServiceBecomingAnotherKindIsStopped(t *testing.T) {
	a := testAgent(t)
	run := filepath.Join(a.root.dir, "opt", "sleeper")
	if err := os.MkdirAll(filepath.Dir(run), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(run, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := a.state.clone()
	svc := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "mod.x", Module: "mod", Build: 1, Kind: "service", Command: []string{"/opt/sleeper"}}}}
	if _, err := a.applyInFull(ctx, svc, st); err != nil {
		t.Fatal(err)
	}
	sup := a.services.(*supervisor)
	rec, ok := sup.readPid("mod.x")
	if !ok || !alive(rec) {
		t.Fatalf("the service did not start: %+v %v", rec, ok)
	}

	content := "x=1\n"
	file := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 3, Resources: []models.Resource{
		{ID: "mod.x", Module: "mod", Build: 2, Kind: "file", Path: "/etc/x.conf", Content: &content}}}
	acts, err := a.applyInFull(ctx, file, st)
	if err != nil {
		t.Fatal(err)
	}
	if alive(rec) {
		t.Fatalf("mod.x is a file now, yet its service's process %d still runs (actions %+v)", rec.PID, acts)
	}
	if _, ok := sup.readPid("mod.x"); ok {
		t.Fatal("the stopped service's pidfile is left behind")
	}
	if m := st.Resources["mod.x"]; m == nil || m.Kind != "file" {
		t.Fatalf("state %+v", m)
	}
	if b, err := os.ReadFile(filepath.Join(a.root.dir, "etc/x.conf")); err != nil || string(b) != content {
		t.Fatalf("the file: %q %v", b, err)
	}
	if len(acts) != 2 || acts[0].Action != "removed" || acts[1].Action != "created" {
		t.Fatalf("actions %+v; want the service removed, then the file created", acts)
	}
}
