package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/meshca"
	"mesh/store"
)

// webManifest is a module whose service serves TLS with a certificate the
// mesh CA signs for the machine's internal names, and checks that it
// reaches its peer by the peer's internal name over verified TLS. The
// lifetime is short so the test sees a renewal (at two thirds: 16 s).
const webManifest = `{"resources": [
  {"name": "runtime", "kind": "tree", "path": "/opt/web"},
  {"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh", "web.mesh"],
   "path": "/etc/web/chain.pem", "key_path": "/etc/web/key.pem", "mode": "0640", "lifetime": "24s",
   "on_renew": [{"service": "service", "signal": "HUP"}]},
  {"name": "service", "kind": "service",
   "command": ["/opt/web/bin/run", "--listen", "127.0.0.1:${var.port}", "--cert", "/etc/web/chain.pem", "--key", "/etc/web/key.pem", "--hups", "/var/web/hups"],
   "after": ["runtime", "cert"],
   "check": {"tls": "127.0.0.1:${var.peer_port}", "server_name": "web.${var.peer}.mesh", "timeout": "2s"}}
]}`

// outsideManifest declares a certificate whose key would land outside the
// roots the hosts allow.
const outsideManifest = `{"resources": [
  {"name": "cert", "kind": "certificate", "names": ["evil.${machine.name}.mesh"], "path": "/etc/evil/chain.pem", "key_path": "/root/.ssh/evil.key"}
]}`

func webTree(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(bin, "tlssvc"))
	if err != nil {
		t.Fatal(err)
	}
	return tarball(t, entry{name: "bin/", typ: tar.TypeDir, mode: 0o755}, entry{name: "bin/run", body: string(b), mode: 0o755})
}

// TestSchema2_CertificatesAndTLSChecks: two of today's hosts (real
// binaries, TLS under the mesh CA) are assigned a module with a
// certificate resource and a tls check. Each is sent schema 2, makes its
// key, gets a certificate for its own internal names, serves it, and its
// tls check passes against the other's internal name. The certificate is
// renewed at two thirds of its short lifetime (reported renewed, naming the
// applied send; the service signalled), and the key's bytes are nowhere
// in the controller's store. Refused: a CSR for another machine's name
// (403, audited), a certificate path outside the allowed roots (the
// declaration refused, whole).
func TestSchema2_CertificatesAndTLSChecks(t *testing.T) {
	c := startControllerTLS(t, store.SQLite)
	c.module("web")
	c.upload("web", webManifest, webTree(t))
	c.module("evil")
	c.upload("evil", outsideManifest, nil)

	p1, p2 := freePort(t), freePort(t)
	hosts := map[string]*hostProc{}
	for _, m := range []struct{ name, port, peer, peerPort string }{{"m1", p1, "m2", p2}, {"m2", p2, "m1", p1}} {
		h := enroll(t, c, m.name, c.URL)
		h.start("--check-every", "1s", "--allow-root", "/opt", "--allow-root", "/etc", "--allow-root", "/var")
		hosts[m.name] = h
		c.setVars(m.name, map[string]string{"port": m.port, "peer": m.peer, "peer_port": m.peerPort})
		c.assign(m.name, "web")
	}
	for _, name := range []string{"m1", "m2"} {
		c.waitApplied(name, 60*time.Second)
		var m machineView
		waitFor(t, 60*time.Second, name+"'s tls check passes against its peer's internal name", func() bool {
			m = c.machine(name)
			return m.Health.State == "passing"
		})
		if m.State != "current" {
			t.Fatalf("%s: %+v", name, m)
		}
		var sends []struct {
			Schema  int    `json:"schema"`
			Trigger string `json:"trigger"`
		}
		var l struct{ Items json.RawMessage }
		c.JSON(ctlReq("/api/v1/machines/"+name+"/sends", c.Admin), 200, &l)
		_ = json.Unmarshal(l.Items, &sends)
		if len(sends) == 0 || sends[0].Schema != 2 {
			t.Fatalf("%s's sends: %+v, want the newest in schema 2", name, sends)
		}
	}
	// What the check said, from the host's own journal.
	if j := hosts["m1"].journalText(); !strings.Contains(j, "tls 127.0.0.1:"+p2+" (web.m2.mesh): verified against the mesh CA") {
		t.Fatalf("m1's journal does not show the verified tls check:\n%s", j)
	}

	// The key and the chain on m1: the key as declared (0640), the chain
	// signed by the mesh CA for m1's names only.
	h1 := hosts["m1"]
	keyPath := filepath.Join(h1.Root, "etc/web/key.pem")
	fi, err := os.Stat(keyPath)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("key file: %v %v, want mode 0640", fi, err)
	}
	chain, _ := os.ReadFile(filepath.Join(h1.Root, "etc/web/chain.pem"))
	blk, _ := pem.Decode(chain)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.CA)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "web.m1.mesh"}); err != nil || strings.Join(leaf.DNSNames, ",") != "web.m1.mesh,web.mesh" {
		t.Fatalf("m1's certificate: names %v: %v", leaf.DNSNames, err)
	}
	key1, _ := os.ReadFile(keyPath)

	// Renewal at two thirds of 24 s: reported renewed, naming the applied
	// send; the service got SIGHUP; a new key.
	applied := c.machine("m1")
	var renewed reportView
	waitFor(t, 60*time.Second, "m1 renews its certificate", func() bool {
		for _, r := range c.reports("m1") {
			if r.Outcome == "renewed" {
				renewed = r
				return true
			}
		}
		return false
	})
	if renewed.Reason != "" || renewed.Generation != applied.AppliedGeneration || renewed.Send == "" {
		t.Fatalf("renewed report %+v; applied generation %d", renewed, applied.AppliedGeneration)
	}
	if s := c.sends("m1"); s[0].ID != renewed.Send {
		t.Fatalf("renewed names send %s, the applied one is %s", renewed.Send, s[0].ID)
	}
	waitFor(t, 10*time.Second, "the service is signalled", func() bool { return exists(filepath.Join(h1.Root, "var/web/hups")) })
	if key2, _ := os.ReadFile(keyPath); bytes.Equal(key1, key2) {
		t.Fatal("renewal kept the old key")
	}
	found := false
	for _, e := range h1.journal() {
		found = found || (e.Outcome == "renewed" && len(e.Actions) == 1 && strings.Contains(e.Actions[0].Detail, "sent SIGHUP to web.service"))
	}
	if !found {
		t.Fatalf("no renewed journal entry naming the signal:\n%s", h1.journalText())
	}
	if m := c.machine("m1"); m.State != "current" || m.Generation != applied.Generation {
		t.Fatalf("after the renewal m1 is %+v; a renewal moves no generation", m)
	}

	// The key's bytes never reached the controller: nothing in its store.
	for _, k := range [][]byte{key1, mustRead(t, keyPath)} {
		blk, _ := pem.Decode(k)
		assertNotStored(t, c.cfg.DataDir, blk.Bytes)                       // the key, DER
		assertNotStored(t, c.cfg.DataDir, bytes.Split(k, []byte("\n"))[1]) // its first PEM line
	}

	// A host asking for another machine's name is refused and audited.
	id, err := agent.LoadIdentity(h1.State)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "web.m2.mesh"},
		DNSNames: []string{"web.m2.mesh", "web.mesh"}}, key)
	body, _ := json.Marshal(map[string]string{"send": renewed.Send, "resource": "web.cert",
		"csr": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))})
	req, _ := http.NewRequest("POST", c.URL+"/api/v1/host/service-certificates", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	ca, _ := meshca.ParsePEM([]byte(id.CA))
	// As m1: its machine certificate (enrolled with one, its token alone
	// is refused).
	m1Cert, err := tls.LoadX509KeyPair(filepath.Join(h1.State, "machine.pem"), filepath.Join(h1.State, "machine.pem"))
	if err != nil {
		t.Fatal(err)
	}
	conf := meshca.ClientConfig(ca)
	conf.Certificates = []tls.Certificate{m1Cert}
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: conf}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var prob struct{ Detail string }
	_ = json.NewDecoder(resp.Body).Decode(&prob)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(prob.Detail, `not given the name "web.m2.mesh"`) {
		t.Fatalf("a CSR for m2's name: %d %q", resp.StatusCode, prob.Detail)
	}
	var audit struct {
		Items []struct{ Action, Target, Detail string }
	}
	c.JSON(ctlReq("/api/v1/audit?limit=50", c.Admin), 200, &audit)
	refusedAudit := false
	for _, e := range audit.Items {
		refusedAudit = refusedAudit || (e.Action == "service-certificate-refused" && e.Target == "machine/m1" && strings.Contains(e.Detail, "web.m2.mesh"))
	}
	if !refusedAudit {
		t.Fatalf("the refused CSR is not in the audit log: %+v", audit.Items)
	}

	// A certificate whose key would land outside the allowed roots: the
	// declaration is refused whole, nothing written, m2 keeps running.
	c.assign("m2", "web", "evil")
	var m2 machineView
	waitFor(t, 30*time.Second, "m2 refuses the declaration", func() bool {
		m2 = c.machine("m2")
		return m2.State == "refused"
	})
	if !strings.Contains(m2.LastReason, "escape: evil.cert: path /root/.ssh/evil.key is outside the allowed roots") {
		t.Fatalf("m2's refusal: %q", m2.LastReason)
	}
	if exists(filepath.Join(hosts["m2"].Root, "etc/evil")) || exists(filepath.Join(hosts["m2"].Root, "root/.ssh/evil.key")) {
		t.Fatal("a refused declaration wrote files")
	}
	if !listening(p2) {
		t.Fatal("m2's service stopped after a refused declaration")
	}
}

func ctlReq(path, token string) ctltest.Request {
	return ctltest.Request{Method: "GET", Path: path, Token: token}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertNotStored fails when b is in any file of the controller's data
// directory (the SQLite store, its WAL, the keys).
func assertNotStored(t *testing.T, dir string, b []byte) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(data, b) {
			t.Errorf("the machine's key is in the controller's %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
