package agent

import (
	"context"
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
