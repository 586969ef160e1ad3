package e2e

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
)

// joinToken is POST /api/v1/join-tokens' answer.
type joinToken struct {
	Token      string `json:"token"`
	CAPin      string `json:"ca_pin"`
	Controller string `json:"controller"`
	Command    string `json:"command"`
}

func (c *controllerProc) joinToken() joinToken {
	c.t.Helper()
	var jt joinToken
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/join-tokens", Token: c.Admin}, 201, &jt)
	return jt
}

// TestTLS_EnrolWithPin_PollApplyReport: a controller serving TLS under its
// mesh CA gives a join token with its pin and the command to paste; that
// command, run as given, enrols the host, which keeps the CA; then polls,
// a blob (a tree's artifact) and reports all go over TLS verified against
// it, and the declaration is applied.
func TestTLS_EnrolWithPin_PollApplyReport(t *testing.T) {
	c := startControllerTLS(t, store.SQLite)
	c.module("site")
	c.upload("site", `{"resources": [
	  {"name": "tree", "kind": "tree", "path": "/srv/site"},
	  {"name": "conf", "kind": "file", "path": "/etc/site.conf", "content": "machine=${machine.name}\n"}]}`,
		tarball(t, entry{name: "index.html", body: "<h1>over TLS</h1>\n"}))

	jt := c.joinToken()
	if jt.CAPin != c.Pin || jt.Controller != c.URL {
		t.Fatalf("join token gives pin %s and controller %s; the controller's are %s and %s", jt.CAPin, jt.Controller, c.Pin, c.URL)
	}
	want := "mesh-host enroll --controller " + c.URL + " --ca-pin " + c.Pin + " --join-token " + jt.Token + ` --name "$(hostname)"`
	if jt.Command != want {
		t.Fatalf("command\n%s\nwant\n%s", jt.Command, want)
	}
	h := &hostProc{t: t, Name: "m1", State: filepath.Join(t.TempDir(), "state"), Root: filepath.Join(t.TempDir(), "root")}
	if err := os.MkdirAll(h.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.cleanup)
	// The command as a person pastes it, on a machine named m1.
	line := strings.Replace(jt.Command, `"$(hostname)"`, "m1", 1) + " --state " + h.State
	cmd := exec.Command("sh", "-c", line)
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	if !strings.Contains(string(out), "verified against the mesh CA "+c.Pin) {
		t.Fatalf("enrol said:\n%s", out)
	}
	id, err := agent.LoadIdentity(h.State)
	if err != nil {
		t.Fatal(err)
	}
	if ca, err := meshca.ParsePEM([]byte(id.CA)); err != nil || meshca.Pin(ca) != c.Pin || id.CAPin != c.Pin {
		t.Fatalf("host.json keeps CA %q (pin %s): %v", id.CA, id.CAPin, err)
	}

	h.start()
	c.assign("m1", "site")
	m := c.waitApplied("m1", 30*time.Second)
	if m.State != "current" {
		t.Fatalf("m1: %+v", m)
	}
	if b, err := os.ReadFile(filepath.Join(h.Root, "srv/site/index.html")); err != nil || string(b) != "<h1>over TLS</h1>\n" {
		t.Fatalf("the tree's file: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(h.Root, "etc/site.conf")); err != nil || string(b) != "machine=m1\n" {
		t.Fatalf("the file: %q %v", b, err)
	}
	if rs := c.reports("m1"); len(rs) == 0 || rs[0].Outcome != "applied" || rs[0].Generation != m.Generation {
		t.Fatalf("reports %+v", rs)
	}
}

// tlsProxy terminates TLS with a certificate of its own CA and forwards
// to the controller: a man in the middle. It counts the requests it saw.
type tlsProxy struct {
	*httptest.Server
	ca       *meshca.CA
	requests atomic.Int64
}

func newTLSProxy(t *testing.T, c *controllerProc) *tlsProxy {
	t.Helper()
	certDER, keyDER, err := meshca.New(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := meshca.Parse(certDER, keyDER)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.IssueServing(nil, time.Now(), time.Hour) // 127.0.0.1 too: only the CA differs
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(c.URL)
	p := &tlsProxy{ca: ca}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = c.transport
	p.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		rp.ServeHTTP(w, r)
	}))
	p.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: meshca.NextProtos}
	p.StartTLS()
	t.Cleanup(p.Close)
	return p
}

// TestTLS_ProxyOfAnotherCA_RefusedBeforeTheToken: a TLS-terminating proxy
// with a CA of its own between the host and the controller. The host,
// given the controller's pin, refuses before it sends anything: the proxy
// sees no request, the message names the pin expected and the pin seen,
// and the join token, never sent, still enrols the host directly.
func TestTLS_ProxyOfAnotherCA_RefusedBeforeTheToken(t *testing.T) {
	c := startControllerTLS(t, store.SQLite)
	p := newTLSProxy(t, c)
	jt := c.joinToken()
	state := filepath.Join(t.TempDir(), "state")
	out, err := exec.Command(filepath.Join(bin, "mesh-host"), "enroll", "--controller", p.URL, "--ca-pin", jt.CAPin,
		"--join-token", jt.Token, "--name", "m1", "--state", state).CombinedOutput()
	if err == nil {
		t.Fatalf("enrolled through a proxy of another CA:\n%s", out)
	}
	for _, want := range []string{"not sending the join token", "expected CA pin " + c.Pin, "saw " + p.ca.Pin()} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if n := p.requests.Load(); n != 0 {
		t.Fatalf("the proxy saw %d request(s): the token may have left", n)
	}
	if exists(filepath.Join(state, "host.json")) {
		t.Fatal("host.json written after a refusal")
	}
	// The token was never spent: the host enrols with it directly.
	out, err = exec.Command(filepath.Join(bin, "mesh-host"), "enroll", "--controller", c.URL, "--ca-pin", jt.CAPin,
		"--join-token", jt.Token, "--name", "m1", "--state", state).CombinedOutput()
	if err != nil {
		t.Fatalf("enrolling directly with the same token: %v\n%s", err, out)
	}
}

// TestTLS_PlainHTTPOffLoopback: a controller listening on every address
// serves TLS without being asked (plain HTTP is answered 400), and plain
// HTTP there needs --insecure-http, which warns at start; a host refuses
// to enrol over plain HTTP with a controller that is not on its machine,
// before it connects.
func TestTLS_PlainHTTPOffLoopback(t *testing.T) {
	t.Run("TLSByDefault", func(t *testing.T) {
		c := &controllerProc{t: t, port: freePort(t), cfg: storetest.Config(t, store.SQLite), tls: true}
		c.extra = []string{"--listen", "0.0.0.0:" + c.port, "--advertise", "ctl.mesh.test"}
		c.URL = "https://127.0.0.1:" + c.port
		t.Cleanup(c.stop)
		c.start()
		resp, err := http.Get("http://127.0.0.1:" + c.port + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP answered %d, want 400 (an HTTPS server)", resp.StatusCode)
		}
		// The join token's command names the advertised name.
		if jt := c.joinToken(); jt.Controller != "https://ctl.mesh.test:"+c.port || !strings.Contains(jt.Command, "--ca-pin "+c.Pin) {
			t.Fatalf("join token %+v", jt)
		}
		// The serving certificate names it, and is HTTP/1.1 only.
		conn, err := tls.Dial("tcp", "127.0.0.1:"+c.port, &tls.Config{RootCAs: meshca.ClientConfig(c.CA).RootCAs,
			ServerName: "ctl.mesh.test", NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			t.Fatalf("ALPN chose %q, want http/1.1", p)
		}
	})
	t.Run("InsecureHTTPWarns", func(t *testing.T) {
		c := &controllerProc{t: t, port: freePort(t), cfg: storetest.Config(t, store.SQLite)}
		c.extra = []string{"--listen", "0.0.0.0:" + c.port, "--insecure-http"}
		c.URL = "http://127.0.0.1:" + c.port
		t.Cleanup(c.stop)
		c.start()
		if !strings.Contains(c.log.String(), "serving plain HTTP on an address that is not loopback (--insecure-http)") {
			t.Fatalf("no warning:\n%s", c.log)
		}
	})
	t.Run("HostRefusesPlainHTTPOffLoopback", func(t *testing.T) {
		l, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := l.Accept(); err == nil {
				accepted <- struct{}{}
				c.Close()
			}
		}()
		ip := nonLoopbackIP(t)
		u := "http://" + net.JoinHostPort(ip, portOf(l.Addr()))
		out, err := exec.Command(filepath.Join(bin, "mesh-host"), "enroll", "--controller", u,
			"--join-token", "tok", "--name", "m1", "--state", filepath.Join(t.TempDir(), "state")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "refusing "+u+": plain HTTP") {
			t.Fatalf("enrol over %s: %v\n%s", u, err, out)
		}
		select {
		case <-accepted:
			t.Fatal("the host connected before refusing")
		case <-time.After(200 * time.Millisecond):
		}
	})
}

func portOf(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

// nonLoopbackIP is an address of this machine that is not loopback
// (documentation's 192.0.2.1 when it has none: the host refuses before
// connecting either way).
func nonLoopbackIP(t *testing.T) string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return "192.0.2.1"
}
