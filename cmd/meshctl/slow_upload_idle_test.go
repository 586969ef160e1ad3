package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An upload that makes progress is never cut by idleTimeout (one was: the
// transport reads each connection from its start, and that read's deadline
// passed while the body was still being written). Here the
// controller takes the body at a steady pace (a chunk every 20 ms, far
// inside the idle timeout of 2 s), and answers as soon as it has it.
func TestMeshctl_ASlowButProgressingUploadIsNotCut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			buf := make([]byte, 64<<10)
			for {
				_, err := r.Body.Read(buf)
				if err != nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"module":"app","number":1,"state":"ready","digest":"sha256:x","size":1,"created_at":"2024-01-01T00:00:00Z","created_by":"a","manifest":{}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"items":[]}`)
	}))
	defer srv.Close()

	old := idleTimeout
	idleTimeout = 2 * time.Second
	defer func() { idleTimeout = old }()
	t.Setenv("MESH_CONTROLLER", srv.URL)
	t.Setenv("MESH_TOKEN", "t")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())

	dir := t.TempDir()
	big := make([]byte, 4<<20) // incompressible: the tar.gz is as big
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "blob"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(manifest, []byte(`{"path":"/opt/app"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run(context.Background(), []string{"builds", "upload", "app", dir, "--manifest", manifest}, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("an upload making progress every 20 ms (idle timeout 2 s) was cut after %v: exit %d, stderr %q", time.Since(start), code, errOut.String())
	}
}
