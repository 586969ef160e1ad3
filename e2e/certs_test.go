package e2e

import (
	"crypto/tls"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
)

// certView is what these tests read of a machine.
type certView struct {
	State         string     `json:"state"`
	RevokedReason string     `json:"revoked_reason"`
	CertNotAfter  *time.Time `json:"certificate_not_after"`
	Applied       int64      `json:"applied_generation"`
	Generation    int64      `json:"generation"`
}

func (c *controllerProc) certView(name string) certView {
	c.t.Helper()
	var v certView
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/" + name, Token: c.Admin}, 200, &v)
	return v
}

// machineSerial is the serial of the certificate in a host's machine.pem.
func machineSerial(t *testing.T, state string) string {
	t.Helper()
	fi, err := os.Stat(filepath.Join(state, "machine.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("machine.pem has mode %v, want 0600", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(filepath.Join(state, "machine.pem"))
	c, err := tls.X509KeyPair(b, b)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber.Text(16)
}

// TestTLS_MachineCertificates: with the real binaries over TLS, a host
// enrolled with the pin holds a certificate for a key made on its machine
// (machine.pem, 0600) and polls and reports by it — its bearer token in
// host.json spoiled, it still applies; it renews at two thirds of a short
// life on its own; stopped past expiry and grace, its certificate is
// refused and its machine says revoked; a machine revoked by an admin is
// refused and says so.
func TestTLS_MachineCertificates(t *testing.T) {
	c := startControllerTLS(t, store.SQLite, "--machine-cert-lifetime", "12s", "--machine-cert-grace", "2s")
	c.module("site")
	c.upload("site", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/site.conf", "content": "machine=${machine.name}\n"}]}`, nil)

	h := enroll(t, c, "m1", c.URL)
	first := machineSerial(t, h.State)
	// Known by its certificate alone: the token is spoiled.
	var id map[string]any
	b, err := os.ReadFile(filepath.Join(h.State, "host.json"))
	if err != nil || json.Unmarshal(b, &id) != nil {
		t.Fatalf("host.json: %v", err)
	}
	id["token"] = "spoiled"
	b, _ = json.Marshal(id)
	if err := os.WriteFile(filepath.Join(h.State, "host.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.LoadIdentity(h.State); err != nil {
		t.Fatal(err)
	}
	h.start()
	c.assign("m1", "site")
	c.waitApplied("m1", 30*time.Second)
	if rs := c.reports("m1"); len(rs) == 0 || rs[0].Outcome != "applied" {
		t.Fatalf("reports %+v", rs)
	}
	before := c.certView("m1").CertNotAfter
	// The host saves the new certificate, then says so in its log: the
	// line is waited for with the rest, not read the instant the file
	// changed.
	waitFor(t, 30*time.Second, "m1 renewed its certificate and said so", func() bool {
		v := c.certView("m1")
		return v.CertNotAfter != nil && before != nil && v.CertNotAfter.After(*before) && machineSerial(t, h.State) != first &&
			strings.Contains(h.log.String(), "machine certificate renewed")
	})
	// Renewed before expiry, so still current.
	c.assign("m1")
	c.waitApplied("m1", 30*time.Second)

	// Stopped past expiry and the grace: refused, and the machine says so.
	h.signal(syscall.SIGTERM)
	end := *c.certView("m1").CertNotAfter
	waitFor(t, 40*time.Second, "m1's certificate past its grace", func() bool { return time.Now().After(end.Add(3 * time.Second)) })
	h.log = nil
	h.start()
	waitFor(t, 30*time.Second, "m1 revoked", func() bool { return c.certView("m1").State == "revoked" })
	if v := c.certView("m1"); !strings.Contains(v.RevokedReason, "past the renewal grace") {
		t.Fatalf("m1 %+v", v)
	}
	waitFor(t, 20*time.Second, "the host says why it is refused", func() bool {
		return strings.Contains(h.log.String(), "past the renewal grace") || strings.Contains(h.log.String(), "was revoked")
	})

	// Revoked by an admin.
	h2 := enroll(t, c, "m2", c.URL)
	h2.start()
	c.waitApplied("m2", 30*time.Second)
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m2/revoke", Token: c.Admin, Body: map[string]string{"reason": "decommissioned"}}, 200, nil)
	if v := c.certView("m2"); v.State != "revoked" || v.RevokedReason != "decommissioned" {
		t.Fatalf("m2 %+v", v)
	}
	waitFor(t, 30*time.Second, "m2's host refused", func() bool { return strings.Contains(h2.log.String(), "machine m2 was revoked") })
}

// TestTLS_HandoverAcrossControllers: two controllers over TLS on one
// PostgreSQL store share one CA, so one pin. Enrolment checks every URL of
// the list against it (a list naming a proxy of another CA is refused
// before the token leaves); the host then polls one by its certificate and,
// when that one stops, moves to the other and applies what it is given
// there, still by certificate.
func TestTLS_HandoverAcrossControllers(t *testing.T) {
	cfg := storetest.Config(t, store.Postgres)
	a := &controllerProc{t: t, port: freePort(t), cfg: cfg, extra: []string{"--tls", "--resync", "3s"}, tls: true}
	a.URL = "https://127.0.0.1:" + a.port
	a.start()
	t.Cleanup(a.stop)
	b := &controllerProc{t: t, port: freePort(t), cfg: store.Config{DataDir: t.TempDir(), DatabaseURL: cfg.DatabaseURL},
		extra: []string{"--tls", "--resync", "3s"}, tls: true}
	b.URL = "https://127.0.0.1:" + b.port
	b.start()
	t.Cleanup(b.stop)
	if a.Pin != b.Pin {
		t.Fatalf("two replicas of one store present CAs %s and %s", a.Pin, b.Pin)
	}
	b.Admin = a.Admin
	b.Env = ctltest.AttachWith(t, b.URL, a.Admin, b.transport)

	// A list with a proxy of another CA in it: refused before the token
	// leaves, which then enrols the host with the right list.
	p := newTLSProxy(t, a)
	jt := a.joinToken()
	state := filepath.Join(t.TempDir(), "state")
	out, err := exec.Command(filepath.Join(bin, "mesh-host"), "enroll", "--controller", a.URL+","+p.URL, "--ca-pin", jt.CAPin,
		"--join-token", jt.Token, "--name", "m1", "--state", state).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "saw "+p.ca.Pin()) || p.requests.Load() != 0 {
		t.Fatalf("a list with a proxy of another CA: %v, the proxy saw %d request(s)\n%s", err, p.requests.Load(), out)
	}

	a.module("site")
	a.upload("site", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/site.conf", "content": "on ${machine.name}\n"}]}`, nil)
	a.module("extra")
	a.upload("extra", `{"resources": [{"name": "x", "kind": "file", "path": "/etc/extra.conf", "content": "extra\n"}]}`, nil)
	h := enroll(t, a, "m1", a.URL+","+b.URL)
	machineSerial(t, h.State)
	h.start()
	a.assign("m1", "site")
	a.waitApplied("m1", 30*time.Second)

	a.stop()
	gen := b.assign("m1", "site", "extra")
	m := b.waitApplied("m1", 60*time.Second)
	if m.AppliedGeneration < gen {
		t.Fatalf("m1 applied %d, want %d", m.AppliedGeneration, gen)
	}
	if got, err := os.ReadFile(filepath.Join(h.Root, "etc/extra.conf")); err != nil || string(got) != "extra\n" {
		t.Fatalf("after the handover: %q %v", got, err)
	}
	if !strings.Contains(h.log.String(), b.URL) {
		t.Fatalf("the host never named the second controller:\n%s", h.log)
	}
}
