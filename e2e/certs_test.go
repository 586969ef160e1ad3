package e2e

import (
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/agent"
	"mesh/controller/ctltest"
	"mesh/store"
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
	waitFor(t, 30*time.Second, "m1 renewed its certificate", func() bool {
		v := c.certView("m1")
		return v.CertNotAfter != nil && before != nil && v.CertNotAfter.After(*before) && machineSerial(t, h.State) != first
	})
	if !strings.Contains(h.log.String(), "machine certificate renewed") {
		t.Fatalf("the host did not say it renewed:\n%s", h.log)
	}
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
