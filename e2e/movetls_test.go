package e2e

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/store"
)

// previousHost builds mesh-host from an earlier commit of this repository
// (MESH_PREVIOUS_HOST_COMMIT, default e1c71bc: the release before machine
// certificates, whose host has no code to move to TLS and decodes only
// declaration schema 1) into bin.
func previousHost(t *testing.T) string {
	t.Helper()
	return previousBinary(t, "mesh-host")
}

// previous holds what previousBinary built in this run: the earlier
// commit's tree is taken out once and each binary built once, whichever
// test asks first.
var previous = struct {
	sync.Mutex
	src   string
	built map[string]string
}{built: map[string]string{}}

// previousBinary builds cmd/<cmd> from the earlier commit (see
// previousHost) into bin as <cmd>-prev, version 0.9.0, and returns its name.
func previousBinary(t *testing.T, cmd string) string {
	t.Helper()
	previous.Lock()
	defer previous.Unlock()
	if name, ok := previous.built[cmd]; ok {
		return name
	}
	commit := os.Getenv("MESH_PREVIOUS_HOST_COMMIT")
	if commit == "" {
		commit = "e1c71bc"
	}
	if previous.src == "" {
		src, err := os.MkdirTemp(bin, "previous-src-") // removed with bin
		if err != nil {
			t.Fatal(err)
		}
		// git archive COMMIT | tar -x: the tree of that commit, without a
		// checkout. It needs the repository's history (.ci/run unshallows a
		// shallow clone); without it the test fails, saying so.
		archive := exec.Command("git", "archive", "--format=tar", commit)
		archive.Dir = ".."
		var archiveErr bytes.Buffer
		archive.Stderr = &archiveErr
		untar := exec.Command("tar", "-x", "-C", src)
		pipe, err := archive.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		untar.Stdin = pipe
		if err := untar.Start(); err != nil {
			t.Fatal(err)
		}
		if err := archive.Run(); err != nil {
			_ = untar.Wait()
			t.Fatalf("git archive %s: %v: %s (the test needs the repository's history: git fetch --unshallow)", commit, err, archiveErr.String())
		}
		if err := untar.Wait(); err != nil {
			t.Fatal(err)
		}
		previous.src = src
	}
	name := cmd + "-prev"
	build := exec.Command("go", "build", "-ldflags", "-X mesh/version.Version=0.9.0 -X mesh/version.Build=1",
		"-o", filepath.Join(bin, name), "./cmd/"+cmd)
	build.Dir = previous.src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s at %s: %v\n%s", cmd, commit, err, out)
	}
	previous.built[cmd] = name
	return name
}

// TestTLS_PreviousReleaseHostMovesToTLS: no flag day. A host of the
// previous release, enrolled over plain HTTP, keeps working when its
// controller starts serving TLS with --host-bearer-until (plain HTTP on
// the same port for it); today's release rolled out to it, it moves to
// TLS by itself: fetches the CA signed by the declaration key it trusts,
// gets its machine certificate, rewrites its URL to https:// and goes on
// applying over TLS. Past the date, a host still on its bearer token is
// refused with a message saying how to move.
func TestTLS_PreviousReleaseHostMovesToTLS(t *testing.T) {
	prev := previousHost(t)
	c := startController(t, store.SQLite)
	c.module("site")
	c.upload("site", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/site.conf", "content": "on ${machine.name}\n"}]}`, nil)
	plainURL := c.URL

	h := &hostProc{t: t, Name: "m1", State: filepath.Join(t.TempDir(), "state"), Root: filepath.Join(t.TempDir(), "root"), binary: prev, launch: true}
	if err := os.MkdirAll(h.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin, prev), "enroll", "--controller", plainURL, "--join-token", c.JoinToken(),
		"--name", "m1", "--state", h.State).CombinedOutput(); err != nil {
		t.Fatalf("enrolling the previous release: %v\n%s", err, out)
	}
	t.Cleanup(h.cleanup)
	// A second machine stays on its bearer token, for the cut-off below: of
	// another platform, so the linux/amd64 release is not rolled out to it.
	var stayID struct {
		Token string `json:"token"`
	}
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{
		"join_token": c.JoinToken(), "name": "m2", "os": "linux", "arch": "arm64"}}, 201, &stayID)
	h.start("--trial-deadline", "20s")
	c.assign("m1", "site")
	c.waitApplied("m1", 30*time.Second)

	// The controller moves to TLS, plain HTTP kept for hosts until the date.
	c.stop()
	c.tls, c.URL = true, "https://127.0.0.1:"+c.port
	c.extra = []string{"--tls", "--host-bearer-until", time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)}
	c.start()
	resp, err := http.Get(plainURL + "/api/v1/machines")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "use https://127.0.0.1:"+c.port) {
		t.Fatalf("the operator API over plain HTTP: %d %s", resp.StatusCode, body)
	}
	c.setVars("m1", map[string]string{"after": "tls"})
	c.waitApplied("m1", 30*time.Second) // the previous release, still over plain HTTP

	c.release("mesh-host-2", "2.0.0")
	c.rollout("2.0.0")
	if v := c.waitRollout("2.0.0", 90*time.Second, "done", "halted"); v.State != "done" {
		t.Fatalf("rollout: %+v\nhost log:\n%s", v, h.log)
	}
	waitFor(t, 30*time.Second, "m1 moved to TLS", func() bool {
		id, err := agent.LoadIdentity(h.State)
		return err == nil && id.CAPin == c.Pin && len(id.Controllers) == 1 && id.Controllers[0] == c.URL
	})
	machineSerial(t, h.State)
	if v := c.certView("m1"); v.CertNotAfter == nil {
		t.Fatalf("m1 has no certificate on record: %+v", v)
	}
	// And it goes on over TLS.
	c.assign("m1")
	c.waitApplied("m1", 30*time.Second)
	if !strings.Contains(h.log.String(), "moved to TLS") {
		t.Fatalf("the host did not say it moved:\n%s", h.log)
	}

	// Past the date: a host still on its bearer token is refused, told how to move.
	c.stop()
	c.extra = []string{"--tls", "--host-bearer-until", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}
	c.start()
	req, _ := http.NewRequest("GET", plainURL+"/api/v1/host/declaration?wait=0s", nil)
	req.Header.Set("Authorization", "Bearer "+stayID.Token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(body), "--host-bearer-until") || !strings.Contains(string(body), "--ca-pin "+c.Pin) {
		t.Fatalf("a bearer-only host past the date: %d %s", resp.StatusCode, body)
	}
}
