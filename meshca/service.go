package meshca

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"
)

// maxRSABits is the largest RSA key a service certificate is issued for:
// the largest in common use (a signature's check grows with the cube of
// the modulus's size).
const maxRSABits = 4096

// ParseCSR reads one PEM "CERTIFICATE REQUEST" and checks its signature:
// the requester holds the key it asks a certificate for.
func ParseCSR(b []byte) (*x509.CertificateRequest, error) {
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("not a PEM CERTIFICATE REQUEST")
	}
	if len(slices.DeleteFunc(rest, func(c byte) bool { return c == '\n' || c == '\r' || c == ' ' || c == '\t' })) > 0 {
		return nil, errors.New("trailing data after the CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	// The key first, its signature after: checking a signature over an
	// RSA modulus of 47,500 bits (a request's 16 KiB hold one) cost the
	// controller 140 ms of CPU, for any host that asks.
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey, ed25519.PublicKey:
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 || n > maxRSABits {
			return nil, fmt.Errorf("an RSA key of %d bits; 2048 to %d", n, maxRSABits)
		}
	default:
		return nil, fmt.Errorf("key type %T is not ECDSA, Ed25519 or RSA", csr.PublicKey)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request signature: %w", err)
	}
	if len(csr.IPAddresses) > 0 || len(csr.EmailAddresses) > 0 || len(csr.URIs) > 0 {
		return nil, errors.New("a service certificate names DNS names only")
	}
	return csr, nil
}

// IssueService signs a service's certificate for the key of csr, valid for
// exactly names (the caller has checked them against what the machine's
// declaration gives it) from now for lifetime. It serves and authenticates
// (server and client auth: a service may call another over mTLS). It
// returns the chain as PEM, leaf first then the CA, and the leaf.
func (ca *CA) IssueService(csr *x509.CertificateRequest, names []string, now time.Time, lifetime time.Duration) ([]byte, *x509.Certificate, error) {
	if len(names) == 0 {
		return nil, nil, errors.New("a service certificate needs at least one name")
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"mesh"}, CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    now.Add(-5 * time.Minute), // a peer's clock a little behind
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if notAfter := ca.Cert.NotAfter; tmpl.NotAfter.After(notAfter) {
		tmpl.NotAfter = notAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), EncodePEM(ca.Cert)...)
	return chain, leaf, nil
}

// NewServiceCSR is a host's request for a service's certificate for names
// (the first is its common name), signed by key made on the machine.
func NewServiceCSR(key *ecdsa.PrivateKey, names []string) ([]byte, error) {
	if len(names) == 0 {
		return nil, errors.New("a service certificate needs a name")
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: names[0]}, DNSNames: names}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}
