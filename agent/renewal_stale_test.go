package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"mesh/models"
)

// A renewal failed (the controller refused it); the next generation
// changes the certificate's names, so the apply issues a new certificate
// for it, valid for its whole lifetime. The failing check "its renewal
// fails" must be gone: nothing is failing, the certificate on disk is new.
func TestCertificate_RenewalFailureClearedByAnApplyThatReissues(t *testing.T) {
	a := testAgent(t)
	var refuse atomic.Bool
	certController(t, a, &refuse)
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Mode: "0600", Lifetime: "1h"}
	if _, err := applyAs(t, a, 1, cert); err != nil {
		t.Fatal(err)
	}
	a.state.Applied, a.state.AppliedSend = 1, "0193b1f2-0000-7000-8000-000000000001"
	makeDue(a, cert.ID) // due
	refuse.Store(true)
	a.renewDue(context.Background())
	failing := func() *models.CheckResult {
		for _, c := range a.checkAll(context.Background(), nil, 0) {
			if c.Resource == cert.ID && !c.OK {
				return &c
			}
		}
		return nil
	}
	if failing() == nil {
		t.Fatal("setup: the failed renewal is no failing check")
	}
	refuse.Store(false)
	// Generation 2: the same certificate for one more name: issued anew.
	cert2 := cert
	cert2.Names = []string{"web.m1.mesh", "www.m1.mesh"}
	acts, err := applyAs(t, a, 2, cert2)
	if err != nil {
		t.Fatal(err)
	}
	a.state.Applied, a.state.AppliedSend = 2, "0193b1f2-0000-7000-8000-000000000002"
	t.Logf("apply: %+v", acts)
	if at, err := a.certificateOnDisk(cert2); err != nil || !time.Now().Before(at) {
		t.Fatalf("setup: the apply did not issue a fresh certificate: %v %v", at, err)
	}
	// The apply's own checks (what its applied report carries).
	if c := failing(); c != nil {
		t.Errorf("the apply issued a new certificate, yet its applied checks say: %s", c.Detail)
	}
	// And between applies, polls later.
	for range 3 {
		a.renewDue(context.Background())
	}
	if c := failing(); c != nil {
		t.Fatalf("a fresh certificate (issued by the apply, not due for 40 minutes) is still a failing check: %s", c.Detail)
	}
}

// The certificate whose renewal failed is removed by the next generation:
// the apply's checks (carried by its applied report) still hold a failing
// check of a resource no longer declared.
func TestCertificate_RenewalFailureOfARemovedCertificateIsNotInTheApplysChecks(t *testing.T) {
	a := testAgent(t)
	var refuse atomic.Bool
	certController(t, a, &refuse)
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Mode: "0600", Lifetime: "1h"}
	if _, err := applyAs(t, a, 1, cert); err != nil {
		t.Fatal(err)
	}
	a.state.Applied, a.state.AppliedSend = 1, "0193b1f2-0000-7000-8000-000000000001"
	makeDue(a, cert.ID)
	refuse.Store(true)
	a.renewDue(context.Background())
	if _, err := applyAs(t, a, 2); err != nil {
		t.Fatal(err)
	}
	// As applyWithRetries does once the apply succeeded.
	for _, c := range a.checkAll(context.Background(), nil, 0) {
		if c.Resource == cert.ID && !c.OK {
			t.Fatalf("generation 2 declares no %s, yet its applied checks fail it: %s", cert.ID, c.Detail)
		}
	}
}
