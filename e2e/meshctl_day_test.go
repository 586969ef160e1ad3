package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/store"
)

// meshctlRun runs the meshctl binary as a script would, in a config dir of
// its own; it returns stdout, stderr and the exit code.
type meshctlRun struct {
	t   *testing.T
	env []string
}

func newMeshctl(t *testing.T) *meshctlRun {
	dir := t.TempDir()
	env := []string{"HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MESH_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	return &meshctlRun{t: t, env: env}
}

func (m *meshctlRun) run(stdin string, extraEnv []string, args ...string) (string, string, int) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "meshctl"), args...)
	cmd.Env = append(append([]string{}, m.env...), extraEnv...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errOut.String(), ee.ExitCode()
	case err != nil:
		m.t.Fatalf("meshctl %v: %v", args, err)
	}
	return out.String(), errOut.String(), 0
}

// json runs meshctl with -o json, wants exit 0, and decodes stdout into out.
func (m *meshctlRun) json(out any, args ...string) {
	m.t.Helper()
	stdout, stderr, code := m.run("", nil, append(args, "-o", "json")...)
	if code != 0 {
		m.t.Fatalf("meshctl %v: exit %d\n%s%s", args, code, stdout, stderr)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(stdout), out); err != nil {
			m.t.Fatalf("meshctl %v: decoding %q: %v", args, stdout, err)
		}
	}
}

// TestMeshctl_ADayThroughMeshctlOnly drives an operator's day with the
// meshctl binary only, as a script (-o json), against a real controller
// and three real hosts: log in, label three machines, give a module to
// role=web, upload a build (the two web machines get it, the third does
// not), a plan whose watch exits 0, a failing build whose watch exits
// non-zero, its rollback, and an API token revoked and then refused.
func TestMeshctl_ADayThroughMeshctlOnly(t *testing.T) {
	c := startController(t, store.SQLite)
	c.AddUser("ops", "admin")
	mc := newMeshctl(t)
	if out, errOut, code := mc.run("password-of-ops\n", nil, "login", c.URL, "--user", "ops", "--password-stdin"); code != 0 {
		t.Fatalf("login: exit %d\n%s%s", code, out, errOut)
	}
	hosts := map[string]*hostProc{}
	for _, n := range []string{"m1", "m2", "m3"} {
		h := enroll(t, c, n, c.URL)
		h.start("--allow-root", "/etc") // the failing build writes elsewhere
		hosts[n] = h
		c.waitApplied(n, 30*time.Second)
	}
	for n, role := range map[string]string{"m1": "web", "m2": "web", "m3": "db"} {
		var lu struct {
			Labels map[string]string
		}
		mc.json(&lu, "machines", "label", n, "role="+role, "zone=a")
		if lu.Labels["role"] != role {
			t.Fatalf("%s labelled %v", n, lu.Labels)
		}
	}
	mc.json(nil, "modules", "create", "web")
	var mu struct {
		Changes []struct{ Machine string }
	}
	mc.json(&mu, "modules", "update", "web", "--selector", "role=web")
	if len(mu.Changes) != 2 {
		t.Fatalf("selector changes %+v", mu.Changes)
	}

	dir := t.TempDir()
	upload := func(build int, path string) {
		t.Helper()
		mf := filepath.Join(dir, fmt.Sprintf("manifest-%d.json", build))
		content := fmt.Sprintf(`{"resources": [{"name": "conf", "kind": "file", "path": %q, "content": "build %d\n"}]}`, path, build)
		if err := os.WriteFile(mf, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tree := filepath.Join(dir, fmt.Sprintf("tree-%d", build))
		if err := os.MkdirAll(tree, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, "README"), []byte("web\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var b struct{ Number int }
		mc.json(&b, "builds", "upload", "web", tree, "--manifest", mf, "--version", fmt.Sprintf("1.0.%d", build))
		if b.Number != build {
			t.Fatalf("uploaded build %d, want %d", b.Number, build)
		}
	}
	has := func(n, want string) bool {
		b, err := os.ReadFile(filepath.Join(hosts[n].Root, "etc/web.conf"))
		return err == nil && string(b) == want
	}
	planOf := func(build int) int64 {
		t.Helper()
		var ps struct {
			Items []struct {
				ID    int64 `json:"id"`
				Build int   `json:"build"`
			}
		}
		mc.json(&ps, "plans", "ls")
		for _, p := range ps.Items {
			if p.Build == build {
				return p.ID
			}
		}
		t.Fatalf("no plan of build %d in %+v", build, ps)
		return 0
	}

	// Build 1 is current at once: the web machines get it, m3 does not.
	upload(1, "/etc/web.conf")
	for _, n := range []string{"m1", "m2"} {
		waitFor(t, 30*time.Second, n+" has build 1", func() bool { return has(n, "build 1\n") })
	}
	if _, err := os.Stat(filepath.Join(hosts["m3"].Root, "etc/web.conf")); err == nil {
		t.Fatal("m3 (role=db) got web")
	}

	// Build 2 goes by a plan, tier by tier; watching it exits 0.
	upload(2, "/etc/web.conf")
	id := planOf(2)
	if out, errOut, code := mc.run("", nil, "plans", "watch", fmt.Sprint(id)); code != 0 {
		t.Fatalf("plans watch %d: exit %d\n%s%s", id, code, out, errOut)
	}
	for _, n := range []string{"m1", "m2"} {
		if !has(n, "build 2\n") {
			t.Fatalf("%s lacks build 2 after its plan was done", n)
		}
	}

	// Build 3 writes outside what the hosts allow: the canary refuses it,
	// the plan halts, its watch exits non-zero; it is rolled back.
	upload(3, "/opt/web.conf")
	id = planOf(3)
	out, errOut, code := mc.run("", nil, "plans", "watch", fmt.Sprint(id))
	if code == 0 || !strings.Contains(out+errOut, "halted") {
		t.Fatalf("plans watch of the failing plan: exit %d\n%s%s", code, out, errOut)
	}
	var p struct{ State string }
	mc.json(&p, "plans", "rollback", fmt.Sprint(id))
	if p.State != "rolled_back" {
		t.Fatalf("after rollback the plan is %q", p.State)
	}
	for _, n := range []string{"m1", "m2"} {
		if !has(n, "build 2\n") {
			t.Fatalf("%s does not run build 2 after the rollback", n)
		}
	}

	// An API token works until it is revoked, then is refused.
	var tok struct {
		ID    string `json:"id"`
		Token string `json:"token"`
	}
	mc.json(&tok, "tokens", "create", "--api", "day-script", "--role", "viewer")
	env := []string{"MESH_TOKEN=" + tok.Token, "MESH_CONTROLLER=" + c.URL}
	if out, errOut, code := mc.run("", env, "machines", "ls", "-o", "json"); code != 0 || !strings.Contains(out, `"m3"`) {
		t.Fatalf("machines ls with the API token: exit %d\n%s%s", code, out, errOut)
	}
	mc.json(nil, "tokens", "revoke", tok.ID)
	if out, errOut, code := mc.run("", env, "machines", "ls", "-o", "json"); code != 1 || !strings.Contains(errOut, "revoked") {
		t.Fatalf("machines ls with the revoked token: exit %d\n%s%s", code, out, errOut)
	}
}
