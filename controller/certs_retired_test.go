package controller_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// TestMachineCerts_ARetiredCertificatePastItsGraceRevokesNothing: a
// machine renewed its certificate and its host presents the new one (the
// old one retired, refused "as replaced"). Once the old one's expiry and
// grace had passed, whoever kept the old machine.pem presented it once,
// and the controller revoked the machine, "past the renewal grace",
// though its host's certificate was valid: the host locked out, the
// dashboard saying a false state. Only the certificate the host uses
// past its grace says the machine can no longer be reached.
func TestMachineCerts_ARetiredCertificatePastItsGraceRevokesNothing(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true, MachineCertLifetime: 10 * time.Second, MachineCertGrace: time.Second})
	old, _ := enrolWithCert(t, e, "m1")
	oc := old.tls(t)
	if resp, b := poll(as(t, e, &oc), "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("poll with the first certificate: %d %s", resp.StatusCode, b)
	}
	// The host renews a little later (so its new certificate outlives the
	// old one's grace) and presents the new one: the old one is retired.
	time.Sleep(3 * time.Second)
	status, b, key := renew(t, as(t, e, &oc), "m1")
	if status != 201 {
		t.Fatalf("renewal: %d %s", status, b)
	}
	var renewed struct{ Certificate string }
	if err := json.Unmarshal(b, &renewed); err != nil {
		t.Fatal(err)
	}
	nc := machineCert{key: key, pem: renewed.Certificate}.tls(t)
	host := as(t, e, &nc)
	if resp, b := poll(host, "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("poll with the renewed certificate: %d %s", resp.StatusCode, b)
	}
	if resp, b := poll(as(t, e, &oc), "", "0s"); resp.StatusCode != 401 || !strings.Contains(detail(b), "replaced") {
		t.Fatalf("the retired certificate: %d %s", resp.StatusCode, b)
	}
	// The old one past its expiry and grace; the renewed one still valid.
	testwait.For(t, 15*time.Second, "the retired certificate past its grace", func() bool {
		return time.Now().After(old.leaf.NotAfter.Add(1500 * time.Millisecond))
	})
	// Whoever kept the old machine.pem presents it once.
	resp, b := poll(as(t, e, &oc), "", "0s")
	t.Logf("the retired certificate past its grace: %d %s", resp.StatusCode, detail(b))

	// The host's valid, in-use certificate must still poll, and the
	// machine must not say revoked.
	ms := machineOf(t, e, "m1")
	resp, b = poll(host, "", "0s")
	if ms.State == "revoked" || resp.StatusCode != 200 {
		t.Fatalf("a retired certificate presented past its grace revoked the machine: state %q (%s); the host's valid certificate (until %s) now polls %d: %s",
			ms.State, ms.RevokedReason, ms.CertNotAfter, resp.StatusCode, detail(b))
	}
}
