package meshca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"
)

// TestPinned_TheCAsOwnCertificateOnly: the pin names a key, and
// any certificate may carry a public key — one an on-path attacker at
// enrolment makes, with the mesh CA's public key, marked a CA, signed by a
// key of the attacker's and valid for one day. Put after the controller's
// real leaf (which the CA's key did sign), it has the pin, is a CA, and the
// leaf verifies against it: the host keeps the attacker's certificate in
// host.json as its only root (the second connection, relayed to the real
// controller, verifies against it as well), and from the day it expires
// the host reaches no controller ("certificate has expired"), nor can
// it enrol again without a person. The CA the host keeps must be one the
// CA's key made: self-signed.
func TestPinned_TheCAsOwnCertificateOnly(t *testing.T) {
	now := time.Now()
	ca := caAt(t, now)
	serving, err := ca.IssueServing([]string{"ctl.example.net"}, now, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	attacker, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	attackerRoot := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "not the mesh"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	forged := &x509.Certificate{SerialNumber: big.NewInt(8), Subject: ca.Cert.Subject,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), // the time bomb
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, forged, attackerRoot, ca.Key.Public(), attacker)
	if err != nil {
		t.Fatal(err)
	}
	forgedCA, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	if Pin(forgedCA) != ca.Pin() {
		t.Fatal("setup: the forged certificate carries the CA's key, so its pin")
	}

	got, err := pinned("ctl.example.net:8443", "ctl.example.net", ca.Pin(), []*x509.Certificate{serving.Leaf, forgedCA})
	if err == nil {
		t.Fatalf("kept as the mesh CA a certificate the CA's key did not make (issuer %q, until %s): "+
			"a host enrolled through an on-path attacker pins it", got.Issuer.CommonName, got.NotAfter.Format(time.RFC3339))
	}
	if !strings.Contains(err.Error(), "did not sign itself") {
		t.Fatalf("the refusal does not say why: %v", err)
	}
	// The CA's own certificate beside the forged one is the one kept.
	got, err = pinned("ctl.example.net:8443", "ctl.example.net", ca.Pin(), []*x509.Certificate{serving.Leaf, forgedCA, ca.Cert})
	if err != nil || !got.Equal(ca.Cert) {
		t.Fatalf("the CA's own certificate after a forged one: %v", err)
	}
}
