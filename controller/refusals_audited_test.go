package controller_test

import (
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// refusedRows are the audit rows of refused host credentials naming
// machine.
func refusedRows(t *testing.T, e *ctltest.Env, machine string) []auditRow {
	var out []auditRow
	for _, action := range []string{"host-refused", "certificate-refused"} {
		for _, a := range audits(t, e, action) {
			if a.Target == "machine/"+machine {
				out = append(out, a)
			}
		}
	}
	return out
}

// TestRefusals_ExpiredCertificatePollIsAudited: "A refusal is a 401 problem
// naming the machine and an audit row" (DESIGN, trust chain 6). A host
// polling with a certificate past its expiry (within the grace) is
// refused; a host that does not renew (an older release, a clock far
// off, a renewal that keeps failing) goes offline and the operator must
// find why in the audit log.
func TestRefusals_ExpiredCertificatePollIsAudited(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true, MachineCertLifetime: 2 * time.Second, MachineCertGrace: time.Hour})
	m, _ := enrolWithCert(t, e, "m1")
	c := m.tls(t)
	host := as(t, e, &c)
	testwait.For(t, 10*time.Second, "the certificate expired", func() bool { return time.Now().After(m.leaf.NotAfter.Add(time.Second)) })
	if resp, b := poll(host, "", "0s"); resp.StatusCode != 401 || !strings.Contains(string(b), "expired") {
		t.Fatalf("poll with an expired certificate: %d %s", resp.StatusCode, b)
	}
	if rows := refusedRows(t, e, "m1"); len(rows) == 0 {
		t.Fatal("m1's polls are refused (its certificate expired) and the audit log says nothing")
	}
}

// TestRefusals_UnknownHostTokenIsAudited: a host token the controller
// signed, for a machine the store does not hold (a store restored from
// before it enrolled), is refused "not known here" — recorded for a
// certificate, but not for the token, though it is the same refusal of
// the same host.
func TestRefusals_UnknownHostTokenIsAudited(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	tok, err := e.Ctl.Server.Auth.IssueHost("ghost", "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	if resp, b := poll(e, tok, "0s"); resp.StatusCode != 401 || !strings.Contains(string(b), "not known here") {
		t.Fatalf("poll of a machine the store lacks: %d %s", resp.StatusCode, b)
	}
	if rows := refusedRows(t, e, "ghost"); len(rows) == 0 {
		t.Fatal("machine ghost's host is refused with a valid token and the audit log says nothing")
	}
}

// TestRefusals_HostTokenOfAnotherKeyIsAudited: a host token signed with
// another controller's key (the controller set up again with new keys, a
// host.json of another mesh) was refused with nothing on the record,
// where a certificate of another CA is recorded by the address it comes
// from: a fleet went silent and the audit log said nothing of why.
func TestRefusals_HostTokenOfAnotherKeyIsAudited(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	e.Enroll("m1")
	other := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	foreign := other.Enroll("m1")
	if resp, b := poll(e, foreign.Token, "0s"); resp.StatusCode != 401 {
		t.Fatalf("poll with another controller's token: %d %s", resp.StatusCode, b)
	}
	for _, a := range audits(t, e, "host-refused") {
		if strings.HasPrefix(a.Target, "address/") && strings.Contains(a.Detail, "did not sign") {
			return
		}
	}
	t.Fatalf("a host token of another key is refused and the audit log says nothing: %+v", audits(t, e, "host-refused"))
}
