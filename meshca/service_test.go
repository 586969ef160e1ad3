package meshca_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	"mesh/meshca"
)

// TestParseCSR: a service's CSR is one PEM request, signed by the key it
// names, for DNS names only; anything else says what is wrong.
func TestParseCSR(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	good := csrPEM(t, ec, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "a.mesh"}, DNSNames: []string{"a.mesh"}})
	tampered := []byte(strings.Replace(string(good), string(good[70:74]), "AAAA", 1))
	for _, tc := range []struct {
		name, err string
		in        []byte
	}{
		{"OK", "", good},
		{"ErrNotPEM", "not a PEM CERTIFICATE REQUEST", []byte("hello")},
		{"ErrCertificateNotRequest", "not a PEM CERTIFICATE REQUEST", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}})},
		{"ErrTrailing", "trailing data", append(append([]byte{}, good...), good...)},
		{"ErrTampered", "certificate request", tampered},
		{"ErrWeakRSA", "RSA key of 1024 bits", csrPEM(t, weak, &x509.CertificateRequest{DNSNames: []string{"a.mesh"}})},
		{"ErrIPAddress", "DNS names only", csrPEM(t, ec, &x509.CertificateRequest{DNSNames: []string{"a.mesh"}, IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := meshca.ParseCSR(tc.in)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// TestIssueService: the certificate carries exactly the names given, for
// the CSR's key, verifies against the CA, and serves and authenticates.
func TestIssueService(t *testing.T) {
	cd, kd, err := meshca.New(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := meshca.Parse(cd, kd)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, err := meshca.ParseCSR(csrPEM(t, ec, &x509.CertificateRequest{DNSNames: []string{"web.m1.mesh", "web.mesh"}}))
	if err != nil {
		t.Fatal(err)
	}
	chain, leaf, err := ca.IssueService(csr, []string{"web.m1.mesh", "web.mesh"}, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "web.mesh", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(&ec.PublicKey) || strings.Count(string(chain), "BEGIN CERTIFICATE") != 2 {
		t.Fatalf("leaf key or chain wrong: %s", chain)
	}
	if d := time.Until(leaf.NotAfter); d > time.Minute || d < 50*time.Second {
		t.Fatalf("lifetime %v, want 1m", d)
	}
}
