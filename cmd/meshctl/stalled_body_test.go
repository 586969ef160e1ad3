package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A controller (or anything between) that sent an answer's headers and
// then stalled held meshctl for good: only the wait for the headers had a
// timeout, not the read of the body.
func TestMeshctl_AStalledAnswerBodyTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"items": [`))
		w.(http.Flusher).Flush()
		select { // the rest never comes while meshctl waits
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	old := idleTimeout
	idleTimeout = 300 * time.Millisecond
	defer func() { idleTimeout = old }()
	t.Setenv("MESH_CONTROLLER", srv.URL)
	t.Setenv("MESH_TOKEN", "t")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())

	type ended struct {
		code     int
		out, err string
	}
	done := make(chan ended, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"machines", "ls"}, strings.NewReader(""), &out, &errOut)
		done <- ended{code, out.String(), errOut.String()}
	}()
	select {
	case e := <-done:
		if e.code == 0 {
			t.Fatalf("meshctl machines ls on a stalled answer: exit 0, stdout %q", e.out)
		}
		if !strings.Contains(e.err, "timeout") {
			t.Errorf("meshctl machines ls on a stalled answer: stderr %q does not say it timed out", e.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("meshctl machines ls still waits for an answer body stalled 20 s ago (its idle timeout is 300 ms)")
	}
}
