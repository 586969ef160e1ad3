package meshca_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
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
		// A modulus of 16,384 bits and a made-up signature: refused for its
		// size, never checked (a check costs ~100 times a 2048-bit one's).
		{"ErrHugeRSA", "RSA key of 16384 bits; 2048 to 4096", hugeRSA(t, 16384)},
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

// hugeRSA is a PEM request for an RSA public key of bits with a made-up
// signature (x509 would check one it made): what an attacker sends
// without the cost of a key.
func hugeRSA(t *testing.T, bits int) []byte {
	t.Helper()
	nb := make([]byte, bits/8)
	_, _ = rand.Read(nb)
	nb[0] |= 0x80 // a modulus of exactly bits bits; no one factors it here
	nb[len(nb)-1] |= 1
	pub, err := asn1.Marshal(struct {
		N *big.Int
		E int
	}{new(big.Int).SetBytes(nb), 65537})
	if err != nil {
		t.Fatal(err)
	}
	type alg struct {
		OID    asn1.ObjectIdentifier
		Params asn1.RawValue
	}
	type keyInfo struct {
		Alg alg
		Key asn1.BitString
	}
	type info struct {
		Version int
		Subject asn1.RawValue
		Key     keyInfo
		Attrs   asn1.RawValue
	}
	null := asn1.RawValue{FullBytes: []byte{5, 0}}
	sig := make([]byte, bits/8)
	_, _ = rand.Read(sig)
	der, err := asn1.Marshal(struct {
		Info info
		Alg  alg
		Sig  asn1.BitString
	}{
		Info: info{
			Subject: asn1.RawValue{FullBytes: []byte{0x30, 0}}, // no name
			Key:     keyInfo{alg{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}, null}, asn1.BitString{Bytes: pub, BitLength: 8 * len(pub)}},
			Attrs:   asn1.RawValue{FullBytes: []byte{0xa0, 0}}, // none
		},
		Alg: alg{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}, null}, // sha256WithRSAEncryption
		Sig: asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}
