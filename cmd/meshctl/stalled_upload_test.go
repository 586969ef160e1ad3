package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A controller (or a proxy between) that takes the connection and then
// stops reading an upload: meshctl's writes block once the socket buffers
// are full, and the transport's header timeout starts only once the body
// is written whole: meshctl waited for good.
func TestMeshctl_StalledUploadIsCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // accepted, never read
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()

	old := idleTimeout
	idleTimeout = 300 * time.Millisecond
	defer func() { idleTimeout = old }()
	t.Setenv("MESH_CONTROLLER", "http://"+ln.Addr().String())
	t.Setenv("MESH_TOKEN", "t")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())

	dir := t.TempDir()
	big := make([]byte, 8<<20) // far more than the socket buffers
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "blob"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(manifest, []byte(`{"path":"/opt/app"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	var out, errOut bytes.Buffer
	go func() {
		done <- run(context.Background(), []string{"builds", "upload", "app", dir, "--manifest", manifest}, strings.NewReader(""), &out, &errOut)
	}()
	select {
	case code := <-done:
		if code == 0 {
			t.Fatalf("exit 0 against a controller that never read")
		}
		t.Logf("cut: exit %d: %s", code, errOut.String())
	case <-time.After(15 * time.Second):
		t.Fatalf("meshctl still writing an upload to a controller that stopped reading 15 s ago (idle timeout 300 ms): it waits for good")
	}
}
