package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"mesh/models"
	"mesh/testwait"
)

// A certificate whose renewal fails is a failing check of the certificate.
// The check loop marked every failing check's resource for its last lines
// as a service that turned unhealthy: the certificate, no service, had its
// "output" read and shipped, kept by the controller as web.cert's service
// log.
func TestRenewalFailure_ShipsNoServiceLogOfTheCertificate(t *testing.T) {
	a, srv := checkingAgent(t, 200*time.Millisecond)
	a.logs = &logShipper{src: a.services.(serviceTail)}
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Lifetime: "1h"}
	a.state.Applied, a.state.Finished, a.state.AppliedSend = 5, 5, "s5"
	a.state.Resources[cert.ID] = &Managed{Kind: models.ResourceCertificate, Module: "web", Build: 1, Digest: "sha256:c", Resource: &cert, Send: "s5"}
	if err := a.saveState(); err != nil {
		t.Fatal(err)
	}
	a.renewals.failed(cert.ID, time.Now().Add(20*time.Minute), errors.New("403 Forbidden: refused"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); a.checkLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-loopDone })
	testwait.For(t, 5*time.Second, "a checked report", func() bool { return len(srv.reports()) > 0 })
	rs := srv.reports()
	for _, r := range rs {
		t.Logf("report %s checks %+v", r.Outcome, r.Checks)
		for _, l := range r.Logs {
			if l.Resource == cert.ID {
				t.Errorf("a certificate's failing renewal shipped %q lines of %s as a service's output: %q", l.Why, l.Resource, l.Lines)
			}
		}
	}
}
