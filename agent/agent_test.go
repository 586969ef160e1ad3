package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/models"
)

type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64 // 0644 when zero
}

func makeTar(tb testing.TB, es ...tarEntry) []byte {
	tb.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			tb.Fatal(err)
		}
		_, _ = io.WriteString(tw, e.body)
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// testAgent is an agent over temp dirs whose blobs are already cached (no
// controller needed for what these tests exercise).
func testAgent(tb testing.TB) *Agent {
	tb.Helper()
	state, rootDir := tb.TempDir(), tb.TempDir()
	root, err := openMachineRoot(rootDir)
	if err != nil {
		tb.Fatal(err)
	}
	sup, err := newSupervisor(state, root, slog.New(slog.DiscardHandler), 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(sup.Close)
	cfg := Config{StateDir: state, Root: rootDir}
	cfg.defaults()
	return &Agent{cfg: cfg, client: newClient(&Identity{Controllers: []string{"http://127.0.0.1:1"}}), root: root,
		services: sup, state: &State{Resources: map[string]*Managed{}}}
}

// cacheBlob puts an artifact in the agent's blob cache and returns its digest.
func cacheBlob(tb testing.TB, a *Agent, b []byte) string {
	tb.Helper()
	d := models.DigestOf(b)
	dir := filepath.Join(a.cfg.StateDir, "blobs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, d[7:]), b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return d
}

func treeDecl(digest, path string) *models.DeclarationPayload {
	return &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
		{ID: "mod.tree", Module: "mod", Build: 1, Kind: "tree", Path: path, Artifact: &models.Artifact{Digest: digest, URL: models.BlobURL(digest)}}}}
}

func TestTree_InnerSymlinksKeptEscapesRefused(t *testing.T) {
	a := testAgent(t)
	ok := makeTar(t,
		tarEntry{name: "bin/run", body: "#!/bin/sh\n"},
		tarEntry{name: "bin/node", link: "run", typ: tar.TypeSymlink},
		tarEntry{name: "lib/up", link: "../bin/run", typ: tar.TypeSymlink},
		tarEntry{name: "lib/hard", link: "bin/run", typ: tar.TypeLink})
	st := a.state.clone()
	acts, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, ok), "/opt/mod"), st)
	if err != nil {
		t.Fatal(err)
	}
	if acts[0].Action != "created" || !strings.Contains(acts[0].Detail, "2 file(s)") {
		t.Fatalf("actions %+v", acts)
	}
	if b, err := os.ReadFile(filepath.Join(a.root.dir, "opt/mod/lib/up")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Fatalf("inner symlink: %q %v", b, err)
	}
	for name, bad := range map[string][]byte{
		"dotdot":         makeTar(t, tarEntry{name: "a/../../x", body: "x"}),
		"absolute":       makeTar(t, tarEntry{name: "/x", body: "x"}),
		"symlink out":    makeTar(t, tarEntry{name: "l", link: "../x", typ: tar.TypeSymlink}),
		"symlink abs":    makeTar(t, tarEntry{name: "l", link: "/etc", typ: tar.TypeSymlink}),
		"hardlink out":   makeTar(t, tarEntry{name: "h", link: "../../etc/passwd", typ: tar.TypeLink}),
		"device":         makeTar(t, tarEntry{name: "d", typ: tar.TypeChar}),
		"fifo":           makeTar(t, tarEntry{name: "f", typ: tar.TypeFifo}),
		"through a link": makeTar(t, tarEntry{name: "l", link: ".", typ: tar.TypeSymlink}, tarEntry{name: "l/../../x", body: "x"}),
	} {
		st := a.state.clone()
		_, err := a.applyInFull(context.Background(), treeDecl(cacheBlob(t, a, bad), "/opt/bad"), st)
		var rf *refusal
		if !errors.As(err, &rf) || !strings.Contains(rf.reason, "escape") {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := os.Lstat(filepath.Join(a.root.dir, "opt/bad")); err == nil {
			t.Errorf("%s: the tree was installed", name)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(a.root.dir), "x")); err == nil {
		t.Fatal("an archive wrote outside the root")
	}
}

func TestTree_HalfDoneInstallRecovered(t *testing.T) {
	a := testAgent(t)
	d := cacheBlob(t, a, makeTar(t, tarEntry{name: "f", body: "1"}))
	// What a crash mid-install leaves: a half-unpacked temp dir and a link
	// never renamed into place.
	vdir := filepath.Join(a.root.dir, "opt/.mod.mesh")
	if err := os.MkdirAll(filepath.Join(vdir, "tmp-dead"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(a.root.dir, "opt/.mod.link-dead")); err != nil {
		t.Fatal(err)
	}
	a.root.recoverTree("/opt/mod")
	if exists(filepath.Join(vdir, "tmp-dead")) || exists(filepath.Join(a.root.dir, "opt/.mod.link-dead")) {
		t.Fatal("leftovers survived recovery")
	}
	st := a.state.clone()
	if _, err := a.applyInFull(context.Background(), treeDecl(d, "/opt/mod"), st); err != nil {
		t.Fatal(err)
	}
	if !a.root.treeLive("/opt/mod", d) {
		t.Fatal("tree not live")
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestSystemd_UnitsVerifyAndCalls: units written by the systemd driver pass
// systemd-analyze verify, and its systemctl calls (made to a stand-in that
// records them: no systemd runs here) are the ones expected.
func TestSystemd_UnitsVerifyAndCalls(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("MESH_TEST_REQUIRE_SYSTEMD") != "" {
			t.Fatal("systemd-analyze is required (MESH_TEST_REQUIRE_SYSTEMD) but missing")
		}
		t.Skip("systemd-analyze not installed")
	}
	rootDir := t.TempDir()
	root, _ := openMachineRoot(rootDir)
	calls := filepath.Join(t.TempDir(), "calls")
	stand := filepath.Join(t.TempDir(), "systemctl")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\necho \"$*\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSystemd(root)
	s.systemctl = stand
	if err := os.MkdirAll(filepath.Join(rootDir, "opt/x/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootDir, "opt/x/bin/run"), []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := models.Resource{ID: "x.service", Module: "x", Build: 3, Kind: "service",
		Command: []string{"/opt/x/bin/run", "--name", `quote"d $HOME 100%`}, Env: map[string]string{"PORT": "9000"}}
	ctx := context.Background()
	act, err := s.Ensure(ctx, r, "sha256:1")
	if err != nil || act != "created" {
		t.Fatalf("ensure: %s %v", act, err)
	}
	unit := filepath.Join(rootDir, "etc/systemd/system", UnitName("x.service"))
	if out, err := exec.Command(analyze, "verify", unit).CombinedOutput(); err != nil {
		b, _ := os.ReadFile(unit)
		t.Fatalf("systemd-analyze verify: %v\n%s\n%s", err, out, b)
	}
	if act, _ := s.Ensure(ctx, r, "sha256:1"); act != "unchanged" {
		t.Fatalf("second ensure: %s", act)
	}
	r.Env["PORT"] = "9001"
	if act, _ := s.Ensure(ctx, r, "sha256:2"); act != "updated" {
		t.Fatalf("changed ensure: %s", act)
	}
	if err := s.Stop(ctx, "x.service"); err != nil {
		t.Fatal(err)
	}
	if exists(unit) {
		t.Fatal("unit file left after stop")
	}
	got, _ := os.ReadFile(calls)
	u := UnitName("x.service")
	want := strings.Join([]string{"daemon-reload", "enable " + u, "restart " + u, "start " + u,
		"daemon-reload", "enable " + u, "restart " + u, "disable --now " + u, "daemon-reload"}, "\n") + "\n"
	if string(got) != want {
		t.Fatalf("systemctl calls:\n%s\nwant:\n%s", got, want)
	}
	// The verifier has teeth: a unit with a relative ExecStart fails it.
	bad := filepath.Join(t.TempDir(), "bad.service")
	_ = os.WriteFile(bad, []byte("[Service]\nExecStart=relative/run\n"), 0o644)
	if err := exec.Command(analyze, "verify", bad).Run(); err == nil {
		t.Fatal("systemd-analyze verify accepted a broken unit")
	}
}

func TestJournal_WordsAPersonReads(t *testing.T) {
	e := Entry{Generation: 42, Outcome: "applied", Send: "s1", Digest: "sha256:abcdef0123456789abcdef",
		Actions: []models.Action{{Resource: "node-tools.runtime", Action: "created", Detail: "239 file(s) at /opt/node-tools, run by node-tools.service"},
			{Resource: "node-tools.config", Action: "unchanged"}}}
	s := e.String()
	for _, want := range []string{"generation 42  applied", "created node-tools.runtime (node-tools): 239 file(s) at /opt/node-tools, run by node-tools.service", "1 resource(s) unchanged"} {
		if !strings.Contains(s, want) {
			t.Errorf("journal line lacks %q:\n%s", want, s)
		}
	}
}

// TestJournal_TornLineIsSkipped: a power loss mid-append leaves the
// journal's last line torn (no newline). The next entry starts a line of
// its own rather than joining it, and the torn line is skipped and named:
// the entries before and after it stay on the record (ReadJournal stopped
// at the torn line, and `mesh-host journal` printed nothing at all).
func TestJournal_TornLineIsSkipped(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(identityPath(dir), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := appendJournal(dir, Entry{Time: time.Now().UTC(), Send: "s5", Generation: 5, Outcome: models.OutcomeApplied}); err != nil {
		t.Fatal(err)
	}
	// The power goes mid-append of generation 6's entry.
	f, err := os.OpenFile(journalPath(dir), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"time":"2026-12-06T10:00:00Z","send":"s6","generation":6,"dig`)
	f.Close()
	// The host starts again and goes on.
	if err := appendJournal(dir, Entry{Time: time.Now().UTC(), Send: "s7", Generation: 7, Outcome: models.OutcomeApplied}); err != nil {
		t.Fatal(err)
	}
	es, err := ReadJournal(dir)
	var damage *JournalDamage
	if len(es) != 2 || es[0].Generation != 5 || es[1].Generation != 7 || !errors.As(err, &damage) || fmt.Sprint(damage.Lines) != "[2]" {
		t.Fatalf("read %+v, %v; want generations 5 and 7, line 2 named", es, err)
	}
	var out strings.Builder
	err = PrintJournal(dir, &out, true)
	if !strings.Contains(out.String(), `"generation":5`) || !strings.Contains(out.String(), `"generation":7`) || !errors.As(err, &damage) {
		t.Fatalf("mesh-host journal --json after one torn line printed %q (err %v): want generations 5 and 7, and the torn line named", out.String(), err)
	}
	out.Reset()
	if err := PrintJournal(dir, &out, false); err != nil || !strings.Contains(out.String(), "generation 7") ||
		!strings.Contains(out.String(), "could not be read and were skipped") {
		t.Fatalf("mesh-host journal after one torn line printed %q (err %v)", out.String(), err)
	}
}

// BenchmarkApply_NoOp569: the no-op apply of a 569-resource declaration
// (target: under 50 ms).
func BenchmarkApply_NoOp569(b *testing.B) {
	a := testAgent(b)
	d := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2}
	for i := range 560 {
		c := fmt.Sprintf("key=%d\n", i)
		d.Resources = append(d.Resources, models.Resource{ID: fmt.Sprintf("mod.f%03d", i), Module: "mod", Build: 1, Kind: "file",
			Path: fmt.Sprintf("/etc/mod/f%03d.conf", i), Content: &c, Mode: "0644"})
	}
	for i := range 9 {
		dg := cacheBlob(b, a, makeTar(b, tarEntry{name: fmt.Sprintf("f%d", i), body: "x"}))
		d.Resources = append(d.Resources, models.Resource{ID: fmt.Sprintf("mod.t%d", i), Module: "mod", Build: 1, Kind: "tree",
			Path: fmt.Sprintf("/opt/t%d", i), Artifact: &models.Artifact{Digest: dg}})
	}
	if _, err := a.applyInFull(context.Background(), d, a.state); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		st := a.state.clone()
		acts, err := a.applyInFull(context.Background(), d, st)
		if err != nil || len(acts) != 569 || acts[0].Action != "unchanged" {
			b.Fatal(err, len(acts))
		}
	}
}

// BenchmarkApply_FirstTree239: the first apply of a 239-file tree.
func BenchmarkApply_FirstTree239(b *testing.B) {
	a := testAgent(b)
	var es []tarEntry
	for i := range 239 {
		es = append(es, tarEntry{name: fmt.Sprintf("lib/%03d/file.js", i), body: strings.Repeat("x", 2000)})
	}
	dg := cacheBlob(b, a, makeTar(b, es...))
	b.ResetTimer()
	for i := range b.N {
		st := &State{Resources: map[string]*Managed{}}
		acts, err := a.applyInFull(context.Background(), treeDecl(dg, fmt.Sprintf("/opt/n%d", i)), st)
		if err != nil || !strings.Contains(acts[0].Detail, "239 file(s)") {
			b.Fatal(err, acts)
		}
	}
}

// TestMovedResources_OldPlaceRemoved: a file or tree whose declared path
// changes is put at the new path, and the old one is removed.
func TestMovedResources_OldPlaceRemoved(t *testing.T) {
	a := testAgent(t)
	dg := cacheBlob(t, a, makeTar(t, tarEntry{name: "f", body: "1"}))
	content := "x\n"
	decl := func(file, tree string) *models.DeclarationPayload {
		d := treeDecl(dg, tree)
		d.Resources = append(d.Resources, models.Resource{ID: "mod.conf", Module: "mod", Build: 1, Kind: "file", Path: file, Content: &content})
		return d
	}
	if _, err := a.applyInFull(context.Background(), decl("/etc/a.conf", "/opt/a"), a.state); err != nil {
		t.Fatal(err)
	}
	acts, err := a.applyInFull(context.Background(), decl("/etc/b.conf", "/opt/b"), a.state)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"etc/a.conf", "opt/a", "opt/.a.mesh"} {
		if exists(filepath.Join(a.root.dir, p)) {
			t.Errorf("%s left behind after the move: %+v", p, acts)
		}
	}
	if !exists(filepath.Join(a.root.dir, "etc/b.conf")) || !a.root.treeLive("/opt/b", dg) {
		t.Fatal("not at the new places")
	}
}
