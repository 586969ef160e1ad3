// Package e2e runs the real mesh-controller and mesh-host binaries on
// loopback, with temp dirs, and checks what a person would: the machines,
// the sends, the reports, the journals and the processes.
package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

var bin string // the built binaries

// syncBuffer is a buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mesh-e2e-bin-")
	if err != nil {
		panic(err)
	}
	bin = dir
	for name, b := range map[string]struct{ pkg, version string }{
		"mesh-controller": {"../cmd/mesh-controller", "1.0.0"}, "mesh-host": {"../cmd/mesh-host", "1.0.0"},
		"mesh-host-2": {"../cmd/mesh-host", "2.0.0"}, "mesh-host-2.1": {"../cmd/mesh-host", "2.1.0"}, "mesh-host-5": {"../cmd/mesh-host", "5.0.0"},
		"svc": {"./testdata/svc", "1.0.0"}, "meshctl": {"../cmd/meshctl", "1.0.0"},
		"exitatstart": {"./testdata/exitatstart", "3.0.0"}, "neverpolls": {"./testdata/neverpolls", "4.0.0"},
		"tlssvc": {"./testdata/tlssvc", "1.0.0"}, "pollsonce": {"./testdata/pollsonce", "1.9.0"},
		"mesh-host-6":   {"../cmd/mesh-host", "6.0.0"},
		"keptthencrash": {"./testdata/keptthencrash", "6.0.0"},
	} {
		cmd := exec.Command("go", "build", "-ldflags", "-X mesh/version.Version="+b.version+" -X mesh/version.Build=1"+
			" -X main.real="+filepath.Join(dir, "mesh-host-6"), "-o", filepath.Join(dir, name), b.pkg)
		pkg := b.pkg
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	// A controller build that knows one migration fewer: an older build
	// against a store a newer one migrated.
	cmd := exec.Command("go", "build", "-tags", "mesh_schema3", "-ldflags", "-X mesh/version.Version=0.9.0 -X mesh/version.Build=0",
		"-o", filepath.Join(dir, "mesh-controller-schema3"), "../cmd/mesh-controller")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the older controller: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// controllerProc is a running mesh-controller binary.
type controllerProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	URL     string
	port    string
	cfg     store.Config
	Admin   string
	AdminPW string
	binary  string // another controller build, for the behind-the-store test
	// unvalidated: its answers are not checked against today's
	// openapi.yaml (a controller of an earlier commit answers by its own).
	unvalidated bool
	extra       []string // more flags of serve
	*ctltest.Env
	log *syncBuffer

	// tls: the controller serves TLS (startControllerTLS); Pin is its mesh
	// CA's pin, read from its banner, and CA that CA, found by the pin.
	tls       bool
	Pin       string
	CA        *x509.Certificate
	transport http.RoundTripper
}

func startController(t *testing.T, dialect string, extra ...string) *controllerProc {
	t.Helper()
	c := &controllerProc{t: t, port: freePort(t), cfg: storetest.Config(t, dialect), extra: extra}
	c.URL = "http://127.0.0.1:" + c.port
	t.Cleanup(c.stop) // first: a start that fails still stops the process and shows its log
	c.start()
	return c
}

func (c *controllerProc) start() {
	c.t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:" + c.port, "--data", c.cfg.DataDir, "--log-level", "info"}, c.extra...)
	if c.cfg.DatabaseURL != "" {
		args = append(args, "--database", c.cfg.DatabaseURL)
	}
	exe := "mesh-controller"
	if c.binary != "" {
		exe = c.binary
	}
	c.cmd = exec.Command(filepath.Join(bin, exe), args...)
	out := &syncBuffer{}
	c.log = &syncBuffer{}
	c.cmd.Stdout, c.cmd.Stderr = out, c.log
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.transport = http.DefaultTransport
	if c.tls {
		c.trustCA(out)
	}
	hc := &http.Client{Transport: c.transport, Timeout: 5 * time.Second}
	waitFor(c.t, 60*time.Second, "controller ready", func() bool {
		if exitedEarly(c.cmd.Process.Pid) {
			c.t.Fatalf("the controller exited before it was ready; its log:\n%s", c.log.String())
		}
		resp, err := hc.Get(c.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	// The banner's last line follows the first start's password on stdout;
	// /readyz can answer before the pipe's copy has delivered either, so
	// the password is read only once the banner is whole.
	waitFor(c.t, 30*time.Second, "the controller's banner", func() bool { return strings.Contains(out.String(), "  log in: POST ") })
	attach := func(admin string) *ctltest.Env {
		if c.unvalidated {
			return &ctltest.Env{T: c.t, URL: c.URL, Admin: admin, HTTP: &http.Client{Transport: c.transport, Timeout: time.Minute}}
		}
		return ctltest.AttachWith(c.t, c.URL, admin, c.transport)
	}
	if m := regexp.MustCompile(`password: (\S+)`).FindStringSubmatch(out.String()); m != nil {
		c.Admin, c.AdminPW = attach("").Login("admin", m[1]), m[1]
	}
	c.Env = attach(c.Admin)
}

// trustCA reads the CA pin from the banner, finds the pinned CA in the
// controller's chain as a host does, and makes the test's transport trust
// it alone.
func (c *controllerProc) trustCA(out *syncBuffer) {
	c.t.Helper()
	pinRE := regexp.MustCompile(`TLS: +on, mesh CA pin (sha256:[0-9a-f]{64})`)
	waitFor(c.t, 60*time.Second, "the controller's banner with its CA pin", func() bool { return pinRE.MatchString(out.String()) })
	c.Pin = pinRE.FindStringSubmatch(out.String())[1]
	u, _ := url.Parse(c.URL)
	ca, err := meshca.Discover(context.Background(), u.Host, u.Hostname(), c.Pin)
	if err != nil {
		c.t.Fatalf("finding the pinned CA: %v", err)
	}
	c.CA = ca
	c.transport = &http.Transport{TLSClientConfig: meshca.ClientConfig(ca)}
}

// startControllerTLS runs a controller serving TLS under its mesh CA on
// loopback (--tls).
func startControllerTLS(t *testing.T, dialect string, extra ...string) *controllerProc {
	t.Helper()
	c := &controllerProc{t: t, port: freePort(t), cfg: storetest.Config(t, dialect), extra: append([]string{"--tls"}, extra...), tls: true}
	c.URL = "https://127.0.0.1:" + c.port
	t.Cleanup(c.stop) // first: a start that fails still stops the process and shows its log
	c.start()
	return c
}

func (c *controllerProc) stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	c.cmd = nil
	if c.t.Failed() {
		c.t.Logf("controller log:\n%s", c.log.String())
	}
}

// exitedEarly says whether the process has exited (a zombie not yet
// waited for), so a start that failed is reported at once with its log
// rather than as a readiness timeout.
func exitedEarly(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state …: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// hostProc is a running mesh-host binary.
type hostProc struct {
	t      *testing.T
	Name   string
	State  string
	Root   string
	cmd    *exec.Cmd
	log    *syncBuffer
	extra  []string
	launch bool   // run under `mesh-host launch`
	binary string // another mesh-host build in bin (a previous release), or an absolute path; default mesh-host
}

// enroll enrols a host against url (a controller or a proxy in front of it).
func enroll(t *testing.T, c *controllerProc, name, url string) *hostProc {
	t.Helper()
	h := &hostProc{t: t, Name: name, State: filepath.Join(t.TempDir(), "state"), Root: filepath.Join(t.TempDir(), "root")}
	if err := os.MkdirAll(h.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"enroll", "--controller", url, "--join-token", c.JoinToken(), "--name", name, "--state", h.State}
	if strings.HasPrefix(url, "https://") {
		args = append(args, "--ca-pin", c.Pin)
	}
	out, err := exec.Command(filepath.Join(bin, "mesh-host"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("enroll %s: %v\n%s", name, err, out)
	}
	t.Cleanup(h.cleanup)
	return h
}

func (h *hostProc) start(extra ...string) {
	h.t.Helper()
	h.extra = extra
	cmd := "run"
	if h.launch {
		cmd = "launch"
	}
	args := append([]string{cmd, "--state", h.State, "--root", h.Root, "--wait", "5s", "--retry", "100ms",
		"--stop-grace", "2s", "--log-level", "debug"}, extra...)
	exe := filepath.Join(bin, "mesh-host")
	if filepath.IsAbs(h.binary) {
		exe = h.binary
	} else if h.binary != "" {
		exe = filepath.Join(bin, h.binary)
	}
	h.cmd = exec.Command(exe, args...)
	if h.log == nil {
		h.log = &syncBuffer{}
	}
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	// Its own process group, so that what it leaves behind can be found and
	// killed; Wait gives up on its output 10 s after it exits.
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	h.cmd.WaitDelay = 10 * time.Second
	if err := h.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
}

// signal sends sig to the host (the launcher, in launch mode) and waits for
// it to exit. A SIGTERM is sent once more after 10 s, with a note: a
// launcher re-executing itself in place as the first arrived can miss it
// (the signal reaches the old image's handler milliseconds before its stop
// is seen, and the new image never knew). A host still there 30 s on
// fails the test saying so, with its process group, instead of hanging
// it; a host that exited but left a process holding its output fails it
// too. What is left of its process group is noted and killed.
func (h *hostProc) signal(sig syscall.Signal) {
	if h.cmd == nil {
		return
	}
	pid := h.cmd.Process.Pid
	_ = h.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	again := time.After(10 * time.Second)
	if sig != syscall.SIGTERM {
		again = nil
	}
	giveUp := time.After(30 * time.Second)
wait:
	for {
		select {
		case err := <-done:
			if errors.Is(err, exec.ErrWaitDelay) {
				h.t.Errorf("host %s (pid %d) exited on %s, but a process it started still holds its output:\n%s",
					h.Name, pid, sig, groupOf(pid))
			}
			break wait
		case <-again:
			h.t.Logf("host %s (pid %d) still runs 10s after %s; sending it again:\n%s", h.Name, pid, sig, groupOf(pid))
			_ = h.cmd.Process.Signal(sig)
		case <-giveUp:
			h.t.Errorf("host %s (pid %d) did not exit within 30s of %s; its process group:\n%s", h.Name, pid, sig, groupOf(pid))
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-done
			break wait
		}
	}
	if left := groupOf(pid); left != "" {
		h.t.Logf("host %s (pid %d) exited on %s, leaving in its process group (killed now):\n%s", h.Name, pid, sig, left)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	h.cmd = nil
}

// groupOf lists the processes of a process group, for a failure message.
func groupOf(pgid int) string {
	var b strings.Builder
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		s, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(s, ')')
		if f := strings.Fields(string(s[i+1:])); i > 0 && len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			args, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
			fmt.Fprintf(&b, "  pid %s ppid %s state %s: %s\n", filepath.Base(filepath.Dir(p)), f[1], f[0], bytes.ReplaceAll(args, []byte{0}, []byte{' '}))
		}
	}
	return b.String()
}

// cleanup stops the host and every service it started (they live in their
// own sessions and would outlive the test).
func (h *hostProc) cleanup() {
	h.signal(syscall.SIGTERM)
	ents, _ := filepath.Glob(filepath.Join(h.State, "services", "*.pid"))
	for _, p := range ents {
		var rec struct{ PID int }
		if b, err := os.ReadFile(p); err == nil && json.Unmarshal(b, &rec) == nil && rec.PID > 0 {
			_ = syscall.Kill(-rec.PID, syscall.SIGKILL)
		}
	}
	if h.t.Failed() {
		h.t.Logf("host %s log:\n%s", h.Name, h.log)
		out, _ := exec.Command(filepath.Join(bin, "mesh-host"), "journal", "--state", h.State).CombinedOutput()
		h.t.Logf("host %s journal:\n%s", h.Name, out)
	}
}

func (h *hostProc) journal() []agent.Entry {
	h.t.Helper()
	out, err := exec.Command(filepath.Join(bin, "mesh-host"), "journal", "--state", h.State, "--json").Output()
	if err != nil {
		h.t.Fatalf("journal: %v", err)
	}
	var es []agent.Entry
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e agent.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			h.t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		es = append(es, e)
	}
	return es
}

func (h *hostProc) journalText() string {
	out, _ := exec.Command(filepath.Join(bin, "mesh-host"), "journal", "--state", h.State).CombinedOutput()
	return string(out)
}

// machine reads a machine from the API.
type machineView struct {
	Name              string `json:"name"`
	Generation        int64  `json:"generation"`
	AppliedGeneration int64  `json:"applied_generation"`
	FinishedGen       int64  `json:"finished_generation"`
	State             string `json:"state"`
	LastOutcome       string `json:"last_outcome"`
	LastReason        string `json:"last_reason"`
	HostVersion       string `json:"host_version"`
	TargetHostVersion string `json:"target_host_version"`
	LauncherVersion   string `json:"launcher_version"`
	Health            struct {
		State  string `json:"state"`
		Check  string `json:"check"`
		Detail string `json:"detail"`
	} `json:"health"`
	Running map[string]struct {
		Build int64 `json:"build"`
	} `json:"running"`
}

func (c *controllerProc) machine(name string) machineView {
	c.t.Helper()
	var m machineView
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/" + name, Token: c.Admin}, 200, &m)
	return m
}

// waitApplied waits until the machine's host applied its latest generation.
func (c *controllerProc) waitApplied(name string, d time.Duration) machineView {
	c.t.Helper()
	var m machineView
	waitFor(c.t, d, name+" applied its latest generation", func() bool {
		m = c.machine(name)
		return m.Generation > 0 && m.AppliedGeneration == m.Generation && m.FinishedGen == m.Generation
	})
	return m
}

func (c *controllerProc) put(path string, gen int64, body any) int64 {
	c.t.Helper()
	resp := c.JSON(ctltest.Request{Method: "PUT", Path: path, Token: c.Admin, Header: map[string]string{"If-Match": fmt.Sprintf(`"%d"`, gen)}, Body: body}, 200, nil)
	n, _ := strconv.ParseInt(strings.Trim(resp.Header.Get("ETag"), `"`), 10, 64)
	return n
}

func (c *controllerProc) assign(machine string, modules ...string) int64 {
	c.t.Helper()
	as := []map[string]any{}
	for _, m := range modules {
		as = append(as, map[string]any{"module": m})
	}
	return c.put("/api/v1/machines/"+machine+"/assignments", c.machine(machine).Generation, map[string]any{"assignments": as})
}

func (c *controllerProc) setVars(machine string, vars map[string]string) int64 {
	c.t.Helper()
	return c.put("/api/v1/machines/"+machine+"/variables", c.machine(machine).Generation, map[string]any{"variables": vars})
}

func (c *controllerProc) module(name string) {
	c.t.Helper()
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: c.Admin, Body: map[string]any{"name": name}}, 201, nil)
}

func (c *controllerProc) upload(module, manifest string, artifact []byte) {
	c.t.Helper()
	resp, b := c.Upload(c.Admin, module, manifest, artifact, "")
	if resp.StatusCode != 201 {
		c.t.Fatalf("upload %s: %d %s", module, resp.StatusCode, b)
	}
}

type reportView struct {
	Send       string `json:"send"`
	Generation int64  `json:"generation"`
	Outcome    string `json:"outcome"`
	Reason     string `json:"reason"`
}

func (c *controllerProc) reports(machine string) []reportView {
	c.t.Helper()
	var l struct{ Items []reportView }
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/" + machine + "/reports?limit=500", Token: c.Admin}, 200, &l)
	return l.Items
}

type sendView struct {
	ID         string `json:"id"`
	Generation int64  `json:"generation"`
	Digest     string `json:"digest"`
	Instance   string `json:"instance"`
	Trigger    string `json:"trigger"`
	Outcome    string `json:"outcome"`
}

func (c *controllerProc) sends(machine string) []sendView {
	c.t.Helper()
	var l struct{ Items []sendView }
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/" + machine + "/sends?limit=500", Token: c.Admin}, 200, &l)
	return l.Items
}

// tarball builds a tar.gz from entries.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarball(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = io.WriteString(tw, e.body)
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// runtimeTree is node-tools' runtime: the svc binary as bin/run, an inner
// symlink, and a few files.
func runtimeTree(t *testing.T) []byte {
	t.Helper()
	svc, err := os.ReadFile(filepath.Join(bin, "svc"))
	if err != nil {
		t.Fatal(err)
	}
	return tarball(t,
		entry{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "bin/run", body: string(svc), mode: 0o755},
		entry{name: "bin/node", link: "run", typ: tar.TypeSymlink},
		entry{name: "lib/current", link: "../bin", typ: tar.TypeSymlink},
		entry{name: "share/README", body: "node tools\n"},
		entry{name: "share/VERSION", body: "17\n"},
	)
}

const runtimeManifest = `{"resources": [
  {"name": "runtime", "kind": "tree", "path": "/opt/node-tools"},
  {"name": "config", "kind": "file", "path": "/etc/node-tools.conf", "content": "port=${var.port}\nmachine=${machine.name}\n", "mode": "0644"},
  {"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run", "--port", "${var.port}", "--config", "/etc/node-tools.conf"],
   "after": ["runtime", "config"], "check": {"tcp": "127.0.0.1:${var.port}"}}
]}`

// copies counts the running processes of the svc listening on port.
func copies(port string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) >= 3 && strings.HasSuffix(args[0], "/opt/node-tools/bin/run") && args[1] == "--port" && args[2] == port {
			if st, _ := os.ReadFile(filepath.Dir(p) + "/stat"); !strings.Contains(string(st), ") Z ") {
				n++
			}
		}
	}
	return n
}

func listening(port string) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// handedOut are the ports freePort has given in this run: the kernel may
// give a just-closed port again, and two services told the same port would
// answer each other's checks (TestHost_AppliesInFullThenRemoves once saw
// m1 and m2 handed one port).
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePort is a loopback port free now and never handed out before in
// this run.
func freePort(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[p] {
			handedOut.ports[p] = true
			return strconv.Itoa(p)
		}
	}
	t.Fatal("no loopback port left that was not handed out already")
	return ""
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, d, what, cond)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
