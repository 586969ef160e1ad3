package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
)

// lastReport waits for a report of outcome on machine and returns it.
func (c *controllerProc) waitReport(machine, outcome, reasonHas string) reportView {
	c.t.Helper()
	var got reportView
	waitFor(c.t, 30*time.Second, fmt.Sprintf("a %s report from %s saying %q", outcome, machine, reasonHas), func() bool {
		for _, r := range c.reports(machine) {
			if r.Outcome == outcome && strings.Contains(r.Reason, reasonHas) {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

// deployed sets up node-tools on one machine behind a proxy and waits
// until it runs.
func deployed(t *testing.T, c *controllerProc, name string) (*hostProc, *proxy, string) {
	t.Helper()
	px := newProxy(t, c.URL)
	h := enroll(t, c, name, px.URL)
	h.start()
	port := freePort(t)
	c.setVars(name, map[string]string{"port": port})
	c.assign(name, "node-tools")
	c.waitApplied(name, 30*time.Second)
	waitFor(t, 10*time.Second, "service listening", func() bool { return listening(port) })
	return h, px, port
}

func nodeTools(t *testing.T, c *controllerProc) {
	c.module("node-tools")
	c.upload("node-tools", runtimeManifest, runtimeTree(t))
}

// TestStaleDeclarationAfterHandover replays the incident: a real 200 for
// generation N, captured between host and controller, is sent again after
// the host applied N+1. The real host refuses it, tears nothing down, and
// the controller stores the refusal with its reason.
func TestStaleDeclarationAfterHandover(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	c.module("mesh-console")
	c.upload("mesh-console", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/console.conf", "content": "console\n"}]}`, nil)
	h, px, port := deployed(t, c, "m1")
	n := c.machine("m1").Generation
	stale := px.byETag(fmt.Sprintf(`"%d"`, n))
	if stale == nil {
		t.Fatal("the proxy captured no declaration of generation N")
	}

	// N+1: the console is assigned beside the runtime.
	c.assign("m1", "node-tools", "mesh-console")
	m := c.waitApplied("m1", 30*time.Second)
	if !exists(filepath.Join(h.Root, "etc/console.conf")) {
		t.Fatal("N+1 was not applied")
	}

	// The stale send arrives.
	px.replay(*stale)
	r := c.waitReport("m1", "refused", "older")
	if r.Generation != n {
		t.Fatalf("refusal names generation %d, want %d", r.Generation, n)
	}
	if !px.injected() {
		t.Fatal("the stale declaration was never delivered")
	}
	// Nothing was torn down.
	if !exists(filepath.Join(h.Root, "etc/console.conf")) || !listening(port) || copies(port) != 1 {
		t.Fatal("the stale declaration tore something down")
	}
	j := h.journal()
	last := j[len(j)-1]
	if last.Outcome != "refused" || last.Generation != n || !strings.Contains(last.Reason, "older") || len(last.Actions) != 0 {
		t.Fatalf("journal: %+v", last)
	}
	if got := c.machine("m1"); got.AppliedGeneration != m.Generation {
		t.Fatalf("applied generation moved to %d", got.AppliedGeneration)
	}
}

// TestEmptyDeclaration_RefusedUnlessIntended: a declaration with no
// resources and no empty_ok (here: the only module assigned has no build)
// is refused while resources run; emptying on purpose removes everything.
func TestEmptyDeclaration_RefusedUnlessIntended(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	c.module("unbuilt")
	h, _, port := deployed(t, c, "m1")
	c.assign("m1", "unbuilt")
	r := c.waitReport("m1", "refused", "empty declaration without empty_ok")
	if r.Generation != c.machine("m1").Generation {
		t.Fatalf("refused generation %d", r.Generation)
	}
	if !listening(port) || !exists(filepath.Join(h.Root, "opt/node-tools")) {
		t.Fatal("an empty declaration tore the machine down")
	}
	if m := c.machine("m1"); m.State != "refused" {
		t.Fatalf("machine state %q after a refusal", m.State)
	}
	// On purpose: PUT [] marks it empty_ok.
	c.put("/api/v1/machines/m1/assignments", c.machine("m1").Generation, map[string]any{"assignments": []any{}})
	c.waitApplied("m1", 30*time.Second)
	waitFor(t, 10*time.Second, "service stopped", func() bool { return copies(port) == 0 })
	if exists(filepath.Join(h.Root, "opt/node-tools")) || exists(filepath.Join(h.Root, "etc/node-tools.conf")) {
		t.Fatal("emptying on purpose left files")
	}
}

// TestRefusals_ForgedOtherMachineAndEscapes: a forged signature, another
// machine's declaration and archives that try to escape are refused,
// reported, journaled, and nothing is written outside the root.
func TestRefusals_ForgedOtherMachineAndEscapes(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	h, px, port := deployed(t, c, "m1")
	h2, px2, _ := deployed(t, c, "m2")
	_ = h2
	gen := c.machine("m1").Generation
	mine := px.byETag(fmt.Sprintf(`"%d"`, gen))

	// Forged: the payload changed after signing (the port), same signature.
	var env struct {
		Payload    []byte            `json:"payload"`
		Signatures []json.RawMessage `json:"signatures"`
	}
	if err := json.Unmarshal(mine.body, &env); err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(string(env.Payload), fmt.Sprintf(`"generation":%d`, gen), fmt.Sprintf(`"generation":%d`, gen+100), 1)
	env.Payload = []byte(forged)
	fb, _ := json.Marshal(env)
	px.replay(captured{header: mine.header, body: fb})
	c.waitReport("m1", "refused", "not verified")

	// Another machine's declaration, validly signed.
	theirs := px2.byETag(fmt.Sprintf(`"%d"`, c.machine("m2").Generation))
	px.replay(*theirs)
	c.waitReport("m1", "refused", "other machine")
	if !listening(port) {
		t.Fatal("a refused declaration stopped the service")
	}

	// Archives that escape.
	outside := filepath.Dir(h.Root)
	for i, tc := range []struct {
		name string
		tar  []byte
		says string
	}{
		{"dotdot", tarball(t, entry{name: "../../escaped-dotdot", body: "x"}), "contains .."},
		{"absolute", tarball(t, entry{name: "/tmp/escaped-absolute", body: "x"}), "absolute"},
		{"symlink out", tarball(t, entry{name: "link", link: "../../..", typ: '2'}), "leaves the tree"},
		{"absolute symlink", tarball(t, entry{name: "link", link: "/etc", typ: '2'}), "absolute path"},
		{"hardlink out", tarball(t, entry{name: "hard", link: "../../../etc/passwd", typ: '1'}), "leaves the tree"},
		{"device", tarball(t, entry{name: "dev", typ: '3'}), "device file"},
	} {
		mod := fmt.Sprintf("evil%d", i)
		c.module(mod)
		// The controller refuses a build whose tree every host would
		// refuse, at its upload...
		if resp, b := c.Upload(c.Admin, mod, `{"resources": [{"name": "tree", "kind": "tree", "path": "/opt/`+mod+`"}]}`, tc.tar, ""); resp.StatusCode != 400 ||
			!strings.Contains(string(b), tc.says) {
			t.Fatalf("%s: the upload of a tree no host unpacks: %d %s", tc.name, resp.StatusCode, b)
		}
		// ...so the host's own refusal is reached through a tree that
		// names the archive as its artifact (another build's bytes).
		c.upload(mod, `{"resources": [{"name": "note", "kind": "file", "path": "/opt/`+mod+`.note", "content": "x"}]}`, tc.tar)
		d := models.DigestOf(tc.tar)
		c.upload(mod, fmt.Sprintf(`{"resources": [{"name": "tree", "kind": "tree", "path": "/opt/%s", "artifact": {"digest": %q, "size": %d, "url": %q}}]}`,
			mod, d, len(tc.tar), models.BlobURL(d)), nil)
		c.assign("m1", "node-tools", mod)
		r := c.waitReport("m1", "refused", tc.says)
		if !strings.Contains(r.Reason, "escape") {
			t.Errorf("%s: reason %q", tc.name, r.Reason)
		}
		if exists(filepath.Join(h.Root, "opt", mod)) {
			t.Errorf("%s: the tree was installed", tc.name)
		}
	}
	for _, p := range []string{filepath.Join(outside, "escaped-dotdot"), "/tmp/escaped-absolute", filepath.Join(filepath.Dir(outside), "escaped-dotdot")} {
		if exists(p) {
			t.Errorf("%s was written outside the root", p)
			os.Remove(p)
		}
	}
	if !listening(port) || copies(port) != 1 {
		t.Fatal("refusals disturbed the running service")
	}
	_ = base64.StdEncoding
}

// TestReenrol_PastTheEarlierMachine: a machine deleted and enrolled again
// under its name starts past the earlier machine's last generation, so its
// host — whose state keeps what it finished, the poll's If-None-Match — is
// sent the new machine's declarations at once (a new machine at generation
// 1 once stayed behind for good, its host saying it had 1), and every
// declaration of the earlier machine, replayed, is older than what the host
// finished: refused, nothing torn down.
func TestReenrol_PastTheEarlierMachine(t *testing.T) {
	c := startController(t, store.SQLite)
	nodeTools(t, c)
	h, px, port := deployed(t, c, "m1")
	for i := range 3 {
		c.setVars("m1", map[string]string{"port": port, "round": strconv.Itoa(i)})
		c.waitApplied("m1", 30*time.Second)
	}
	n := c.machine("m1").Generation
	earlier := px.byETag(fmt.Sprintf(`"%d"`, n))
	if earlier == nil {
		t.Fatal("the proxy captured no declaration of the earlier machine's last generation")
	}

	// As the refusal to enrol over host.json says: stop the host, delete
	// the machine, remove host.json, enrol again, start the host.
	h.signal(syscall.SIGTERM)
	c.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m1", Token: c.Admin}, 204, nil)
	if err := os.Remove(filepath.Join(h.State, "host.json")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin, "mesh-host"), "enroll", "--controller", px.URL, "--join-token", c.JoinToken(),
		"--name", "m1", "--state", h.State).CombinedOutput(); err != nil {
		t.Fatalf("enrol again: %v\n%s", err, out)
	}
	if g := c.machine("m1").Generation; g != n+1 {
		t.Fatalf("the new machine starts at generation %d, want %d (past the earlier one's %d)", g, n+1, n)
	}
	h.start()
	c.setVars("m1", map[string]string{"port": port})
	c.assign("m1", "node-tools")
	m := c.waitApplied("m1", 30*time.Second)

	px.replay(*earlier)
	// Its send was the earlier machine's, gone with it: the controller
	// refuses the report, and the host's journal keeps the refusal.
	waitFor(t, 30*time.Second, "the host's refusal of the earlier machine's generation", func() bool {
		for _, e := range h.journal() {
			if e.Outcome == "refused" && e.Generation == n && strings.Contains(e.Reason, "older") {
				return true
			}
		}
		return false
	})
	if !px.injected() {
		t.Fatal("the earlier machine's declaration was never delivered")
	}
	if got := c.machine("m1"); got.AppliedGeneration != m.Generation || !listening(port) {
		t.Fatalf("after the replay: applied %d (want %d), listening %v", got.AppliedGeneration, m.Generation, listening(port))
	}
}
