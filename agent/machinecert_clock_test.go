package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
)

// TestMachineCert_AHostClockAheadDoesNotRenewAtEveryTurn: a host whose
// clock was ahead of the controller's by more than a third of the machine
// certificate's lifetime judged every certificate it was just given due by
// its wall clock, and renewed it again at the next turn of its loop.
func TestMachineCert_AHostClockAheadDoesNotRenewAtEveryTurn(t *testing.T) {
	const lifetime = time.Hour
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true, MachineCertLifetime: lifetime, MachineCertGrace: time.Hour})
	// The controller's clock 45 minutes behind the host's.
	e.Ctl.Store.Now = func() time.Time { return time.Now().Add(-45 * time.Minute).UTC() }

	a := testAgent(t)
	id, err := Enroll(context.Background(), Enrolment{Controllers: []string{e.URL}, JoinToken: e.JoinToken(),
		CAPin: e.Ctl.CA.Pin(), Name: "m1", StateDir: a.cfg.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	a.id = id
	a.client = newClient(id)
	serials := []string{id.certs.leaf().SerialNumber.Text(16)}
	for range 3 {
		a.renew(context.Background()) // what each turn of the poll loop does
		serials = append(serials, id.certs.leaf().SerialNumber.Text(16))
	}
	renewals := 0
	for i := 1; i < len(serials); i++ {
		if serials[i] != serials[i-1] {
			renewals++
		}
	}
	if renewals > 1 {
		t.Fatalf("the host renewed its machine certificate %d times in 3 turns of its loop: %v", renewals, serials)
	}
}

// TestMachineCert_AnExpiredCertificateIsRenewedWithinTheGrace: the host
// renewed its machine certificate, then its wall clock moved past the
// certificate's end while its monotonic clock did not (a laptop suspended,
// an instance hibernated; here the controller's clock set right after it
// issued by a clock behind). Held back for half a lifetime on the
// monotonic clock, the renewal waited past the controller's grace, the
// host's polls refused meanwhile.
func TestMachineCert_AnExpiredCertificateIsRenewedWithinTheGrace(t *testing.T) {
	const lifetime = time.Hour
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true, MachineCertLifetime: lifetime, MachineCertGrace: 2 * time.Hour})
	var skew atomic.Int64
	skew.Store(int64(-2 * time.Hour)) // the controller's clock two hours behind
	e.Ctl.Store.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())).UTC() }

	a := testAgent(t)
	id, err := Enroll(context.Background(), Enrolment{Controllers: []string{e.URL}, JoinToken: e.JoinToken(),
		CAPin: e.Ctl.CA.Pin(), Name: "m1", StateDir: a.cfg.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	a.id = id
	a.client = newClient(id)
	a.renew(context.Background()) // due on the host's clock: renewed once
	renewed := id.certs.leaf().SerialNumber.Text(16)

	// The controller's clock set right: the certificate it just issued
	// expired an hour ago, within the two hours' grace.
	skew.Store(0)
	leaf := id.certs.leaf()
	if !time.Now().After(leaf.NotAfter) {
		t.Fatalf("fixture: certificate valid until %s", leaf.NotAfter)
	}
	a.renewTried = time.Now().Add(-time.Minute) // a minute since the last ask
	a.renew(context.Background())               // the next turn of the poll loop
	if got := id.certs.leaf().SerialNumber.Text(16); got == renewed {
		t.Fatalf("the host holds certificate %s, expired at %s and within the controller's grace, and did not renew it", got, leaf.NotAfter.Format(time.RFC3339))
	}
}
