package controller_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRenewals_LimitedPerMachine: a host credential asking for a new
// certificate again and again is issued ten, then refused (429, with when
// to come back), on the record once: every ask was a signature, a write of
// its machine and an audit row, ~300 a second without end.
func TestRenewals_LimitedPerMachine(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	m, _ := enrolWithCert(t, e, "m1")
	c := m.tls(t)
	host := as(t, e, &c)
	key, _ := meshca.NewKey()
	csr, _ := meshca.NewCSR(key, "m1")
	codes := map[int]int{}
	var last string
	for range 50 {
		resp, b := host.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/certificate", Body: map[string]string{"csr": string(csr)}})
		codes[resp.StatusCode]++
		if resp.StatusCode == 429 {
			last = string(b) + " Retry-After " + resp.Header.Get("Retry-After")
		}
	}
	t.Logf("50 asks: %v; %s", codes, last)
	if codes[201] > 11 || codes[429] < 39 || !strings.Contains(last, "too many certificates from machine m1") || strings.HasSuffix(last, "Retry-After ") {
		t.Fatalf("50 asks of one machine: %v; %s", codes, last)
	}
	if rows := audits(t, e, "certificate-refused"); len(rows) != 1 {
		t.Fatalf("%d certificate-refused rows, want one a minute: %+v", len(rows), rows)
	}
}

// TestRenewals_PresentingEachLeavesFewRevocations: a host renewing and
// presenting each new certificate in turn retires each one before with a
// revocation row, kept for the certificate's lifetime and read at every
// instance's heartbeat: ten, then the limit, where 150 cycles made 150.
func TestRenewals_PresentingEachLeavesFewRevocations(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	m, _ := enrolWithCert(t, e, "m1")
	cur := m.tls(t)
	ctx := context.Background()
	before, err := e.Ctl.Store.Revocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	issued := 0
	for range 30 {
		status, b, key := renew(t, as(t, e, &cur), "m1")
		if status == 429 {
			continue
		}
		if status != 201 {
			t.Fatalf("renewal: %d %s", status, b)
		}
		issued++
		var out struct{ Certificate string }
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		cur = machineCert{key: key, pem: out.Certificate}.tls(t)
		if resp, b := poll(as(t, e, &cur), "", "0s"); resp.StatusCode != 200 && resp.StatusCode != 304 {
			t.Fatalf("a poll with the new certificate: %d %s", resp.StatusCode, b)
		}
	}
	after, err := e.Ctl.Store.Revocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if added := len(after) - len(before); issued > 11 || added > 11 {
		t.Fatalf("30 renew-and-present cycles: %d issued, %d revocation rows", issued, added)
	}
}
