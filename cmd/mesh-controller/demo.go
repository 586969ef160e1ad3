package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"mesh/agent"
	"mesh/auth"
	"mesh/controller"
	"mesh/models"
	"mesh/store"
)

// demo starts a controller on a fresh store in a temp dir, with three
// local hosts (each its own state and root dir) and two sample modules, so
// a newcomer sees a living mesh and can click through it.
func demo(ctx context.Context, listen string, stdout, stderr io.Writer) error {
	dir, err := os.MkdirTemp("", "mesh-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// TLS under the mesh CA even on loopback: the demo shows the real path,
	// hosts enrolling with the pin.
	c, err := controller.Start(ctx, controller.Config{Listen: listen, DataDir: filepath.Join(dir, "controller"), Log: log, Out: stdout, TLS: true})
	if err != nil {
		return err
	}
	defer c.Stop()
	st := c.Store
	if err := demoModules(ctx, st); err != nil {
		return err
	}
	hosts := []string{"demo-1", "demo-2", "demo-3"}
	agents, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, len(hosts))
	for i, name := range hosts {
		tok := auth.NewSecret()
		if err := st.CreateJoinToken(ctx, "demo", auth.HashToken(tok), time.Now().Add(time.Hour)); err != nil {
			return err
		}
		state, root := filepath.Join(dir, name, "state"), filepath.Join(dir, name, "root")
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		if _, err := agent.Enroll(ctx, agent.Enrolment{Controllers: []string{c.URL()}, JoinToken: tok, CAPin: c.CA.Pin(), Name: name, StateDir: state}); err != nil {
			return err
		}
		m, err := st.Machine(ctx, name)
		if err != nil {
			return err
		}
		vars := map[string]string{"greeting": fmt.Sprintf("hello from %s", name), "canary": fmt.Sprint(i == 0)}
		if m, err = st.SetVariables(ctx, "demo", name, &m.Generation, vars); err != nil {
			return err
		}
		as := []models.AssignmentView{{Module: "motd"}}
		if i < 2 {
			as = append(as, models.AssignmentView{Module: "hello"})
		}
		if _, err = st.SetAssignments(ctx, "demo", name, &m.Generation, as); err != nil {
			return err
		}
		go func() {
			defer func() { done <- struct{}{} }()
			err := agent.Run(agents, agent.Config{StateDir: state, Root: root, Wait: 20 * time.Second, StopGrace: 2 * time.Second, Log: log})
			if err != nil {
				log.Error("demo host", "host", name, "err", err)
			}
		}()
	}
	caFile := filepath.Join(dir, "mesh-ca.pem")
	if err := os.WriteFile(caFile, c.CA.PEM(), 0o644); err != nil {
		return err
	}
	// A state other than current, on demand: demo-2's check is that its
	// config file is there.
	breakIt := filepath.Join(dir, hosts[1], "root", "etc", "hello.conf")
	fmt.Fprintf(stdout, "mesh demo: a controller and three hosts (%s) in %s, over TLS under the mesh CA (pin %s)\n"+
		"  dashboard: %s/  (log in as admin with the password above; your browser does not know the mesh CA: trust %s, or accept the warning)\n"+
		"  curl:      curl --cacert %s %s/readyz\n"+
		"  try:       rm %s  (%s's check fails within 10 s: its health says which check and what it said, and %s later its state is unhealthy)\n"+
		"  Ctrl-C stops it and removes everything.\n",
		fmt.Sprint(hosts), dir, c.CA.Pin(), c.URL(), caFile, caFile, c.URL(), breakIt, hosts[1], models.UnhealthyAfter)
	<-ctx.Done()
	cancel()
	for range hosts {
		<-done
	}
	// The hosts' services live in sessions of their own, to outlive a
	// host's restart; the demo ends them itself.
	for _, name := range hosts {
		pids, _ := filepath.Glob(filepath.Join(dir, name, "state", "services", "*.pid"))
		for _, p := range pids {
			var rec struct{ PID int }
			if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &rec) == nil && rec.PID > 0 {
				_ = syscall.Kill(-rec.PID, syscall.SIGTERM)
			}
		}
	}
	return nil
}

// The demo's manifests are files so that the manifest schema's test
// validates the very ones the demo builds.
var (
	//go:embed demo/motd.json
	demoMotd string
	//go:embed demo/hello.json
	demoHello string
)

// demoModules makes motd (a file) and hello (a tree with a script, a
// config file and a service checked by an exec check).
func demoModules(ctx context.Context, st *store.Store) error {
	for _, m := range []string{"motd", "hello"} {
		if err := st.CreateModule(ctx, "demo", &models.Module{Name: m, Kind: models.KindService, SourcePaths: "[]", Tiers: `[{"machines":1},{"percent":100}]`}); err != nil {
			return err
		}
	}
	if err := st.CreateBuild(ctx, "demo", "motd", &models.Build{Version: "1.0.0", Commit: "demo", Manifest: demoMotd}, nil); err != nil {
		return err
	}
	// The check says what it found: a health that says "what it said"
	// should have words to say.
	script := "#!/bin/sh\nif [ \"$1\" = --check ]; then\n  if [ -f \"$MESH_ROOT/etc/hello.conf\" ]; then echo \"hello.conf is there\"; exit 0; fi\n" +
		"  echo \"$MESH_ROOT/etc/hello.conf is missing\"; exit 1\nfi\necho \"hello, serving under $MESH_ROOT\"\nexec sleep 2147483647\n"
	art, err := demoTar(map[string]string{"bin/hello": script, "README": "the hello module of the mesh demo\n"})
	if err != nil {
		return err
	}
	blob, err := st.PutBlob(ctx, bytes.NewReader(art))
	if err != nil {
		return err
	}
	return st.CreateBuild(ctx, "demo", "hello", &models.Build{Version: "1.0.0", Commit: "demo", Manifest: demoHello,
		Digest: blob.Digest, Size: blob.Size}, blob)
}

func demoTar(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
