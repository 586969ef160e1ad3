package e2e

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mesh/controller/ctltest"
	"mesh/store"
)

var (
	meshctlOnce sync.Once
	meshctlErr  error
)

// meshctlBin builds meshctl into the binaries' dir once, for the tests
// that drive it.
func meshctlBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(bin, "meshctl")
	meshctlOnce.Do(func() {
		out, err := exec.Command("go", "build", "-ldflags", "-X mesh/version.Version=1.0.0", "-o", p, "../cmd/meshctl").CombinedOutput()
		if err != nil {
			meshctlErr = err
			t.Logf("build meshctl: %s", out)
		}
	})
	if meshctlErr != nil {
		t.Fatalf("build meshctl: %v", meshctlErr)
	}
	return p
}

// TestLogs_FailingServiceShipsItsLastLines, with real binaries: a service
// that cannot bind its port exits, the host's supervisor starts it again,
// and the host ships its last lines in a checked report naming the
// applied send. The API answers them with when they were shipped, and
// `meshctl logs` prints them: what the service said, and how it exited.
func TestLogs_FailingServiceShipsItsLastLines(t *testing.T) {
	c := startController(t, store.SQLite)
	c.module("node-tools")
	// The port is taken: the service fails at start, every time.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strings.TrimPrefix(taken.Addr().String(), "127.0.0.1:")
	manifest := `{"resources": [
  {"name": "runtime", "kind": "tree", "path": "/opt/node-tools"},
  {"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run", "--port", "${var.port}"], "after": ["runtime"]}
]}`
	c.upload("node-tools", manifest, runtimeTree(t))
	h := enroll(t, c, "m1", c.URL)
	h.start("--check-every", "1s")
	c.setVars("m1", map[string]string{"port": port})
	c.assign("m1", "node-tools")
	m := c.waitApplied("m1", 60*time.Second)

	type logView struct {
		Resource   string    `json:"resource"`
		Why        string    `json:"why"`
		Lines      []string  `json:"lines"`
		Send       string    `json:"send"`
		Generation int64     `json:"generation"`
		ShippedAt  time.Time `json:"shipped_at"`
	}
	var got logView
	waitFor(t, 60*time.Second, "m1 shipped the failing service's last lines", func() bool {
		var l struct{ Items []logView }
		resp, body := c.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs?resource=node-tools.service", Token: c.Admin})
		if resp.StatusCode != 200 {
			return false
		}
		if err := json.Unmarshal(body, &l); err != nil || len(l.Items) != 1 {
			return false
		}
		got = l.Items[0]
		// The apply's report ships them as unhealthy (the service exited
		// before its report); its first restart ships them again.
		return got.Why == "restarted" && strings.Contains(strings.Join(got.Lines, "\n"), "exited: exit status 1")
	})
	text := strings.Join(got.Lines, "\n")
	if got.Why != "restarted" || got.Generation != m.AppliedGeneration || got.ShippedAt.IsZero() ||
		!strings.Contains(text, "svc: listen tcp 127.0.0.1:"+port) || !strings.Contains(text, "address already in use") {
		t.Fatalf("the shipped lines: %+v", got)
	}
	var applied string
	for _, s := range c.sends("m1") {
		if s.Generation == m.AppliedGeneration {
			applied = s.ID
		}
	}
	if got.Send != applied {
		t.Fatalf("the lines came with send %q, not the applied send %q", got.Send, applied)
	}
	found := false
	for _, r := range c.reports("m1") {
		found = found || (r.Outcome == "checked" && r.Send == applied)
	}
	if !found {
		t.Fatal("no checked report names the applied send")
	}
	if st := c.machine("m1").State; st != "current" {
		t.Fatalf("a checked report moved the machine to %s", st)
	}

	// meshctl, as an operator would run it.
	cmd := exec.Command(meshctlBin(t), "logs", "m1", "node-tools.service", "--tail", "50")
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "MESH_CONTROLLER="+c.URL, "MESH_TOKEN="+c.Admin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("meshctl logs: %v\n%s%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "address already in use") || !strings.Contains(out.String(), "--- mesh-host: node-tools.service (pid ") ||
		!strings.Contains(errOut.String(), "node-tools.service: restarted, shipped ") {
		t.Fatalf("meshctl logs printed:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	t.Run("Dashboard", func(t *testing.T) {
		ctx := newBrowser(t, chromium(t))
		login(t, ctx, c.URL, "admin", c.AdminPW)
		block := `#logs [data-resource="node-tools.service"]`
		run(t, ctx, "the machine page's service logs", chromedp.Navigate(c.URL+"/machines/m1"), chromedp.WaitVisible(css(block+" pre")))
		if text := get(t, ctx, "the shipped lines", chromedp.Text(css(block+" pre"))); !strings.Contains(text, "address already in use") {
			t.Fatalf("the page shows:\n%s", text)
		}
		if why := get(t, ctx, "why", chromedp.Text(css(block+" [data-why]"))); why != "restarted" {
			t.Fatalf("why: %q", why)
		}
	})

	cmd = exec.Command(meshctlBin(t), "logs", "m1", "node-tools.runtime")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "MESH_CONTROLLER="+c.URL, "MESH_TOKEN="+c.Admin)
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "has shipped no lines of node-tools.runtime") {
		t.Fatalf("meshctl logs of a resource that shipped none: %v\n%s", err, b)
	}
}
