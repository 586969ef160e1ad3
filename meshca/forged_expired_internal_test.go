package meshca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net/url"
	"testing"
	"time"
)

// TestVerifyMachine_ExpiredForgeryIsForged: a certificate of another CA
// that is also long expired was reported as the named machine's own past
// its grace (its refusal audited under that machine's name, a row per
// name an attacker made up, and the machine told to enrol again), not as
// forged: the chain is verified before the dates are judged.
func TestVerifyMachine_ExpiredForgeryIsForged(t *testing.T) {
	now := time.Now()
	ca := caAt(t, now)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(MachineURIPrefix + "m1")
	for _, na := range []time.Time{now.Add(time.Hour), now.Add(-365 * 24 * time.Hour)} {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "m1", SerialNumber: "x"},
			NotBefore: na.Add(-48 * time.Hour), NotAfter: na, URIs: []*url.URL{u}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		leaf, _ := x509.ParseCertificate(der)
		_, err := ca.VerifyMachine([]*x509.Certificate{leaf}, now, 7*24*time.Hour)
		var ce *ClientError
		if !errors.As(err, &ce) {
			t.Fatal(err)
		}
		t.Logf("NotAfter %s: Forged=%v Machine=%q Reason=%q", na.Format(time.DateOnly), ce.Forged, ce.Machine, ce.Reason)
		if !ce.Forged {
			t.Errorf("a certificate of another CA, NotAfter %s, is not marked Forged", na.Format(time.DateOnly))
		}
	}
}

// caAt is a new mesh CA made at now (for the package's own tests).
func caAt(t *testing.T, now time.Time) *CA {
	t.Helper()
	cd, kd, err := New(now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := Parse(cd, kd)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
