// Package meshca is the mesh's own certificate authority: the CA the
// controller keeps in its store, the serving certificates it issues, the pin
// by which a host recognises it at enrolment (sha256 of the CA's
// SubjectPublicKeyInfo, as kubeadm's discovery-token-ca-cert-hash), and the
// discovery of a pinned CA from a server's handshake. Standard library only:
// the controller and the host both use it.
package meshca

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// Lifetimes. The CA outlives every certificate it issues by years; a
// serving certificate is short and renewed by the controller itself.
const (
	CALifetime      = 20 * 365 * 24 * time.Hour
	ServingLifetime = 30 * 24 * time.Hour
)

// LocalNames are in every serving certificate, so a controller is always
// reachable over TLS on its own machine.
var LocalNames = []string{"localhost", "127.0.0.1", "::1"}

// NextProtos is the only protocol offered by ALPN on either side: HTTP/1.1,
// since a parked long poll takes its connection over (Hijack), which
// HTTP/2 does not allow.
var NextProtos = []string{"http/1.1"}

// CA is the mesh's certificate authority, its private key opened.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// New makes a CA: an ECDSA P-256 key (browsers refuse Ed25519 server
// certificates, and the CA signs those) and a self-signed certificate that
// may sign leaves only (no intermediate CAs). It returns the certificate
// and the PKCS#8 private key, both DER, as the store keeps them.
func New(now time.Time) (certDER, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"mesh"}, CommonName: "mesh CA " + hex.EncodeToString(suffix)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	certDER, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certDER, keyDER, nil
}

// Parse opens a stored CA: the certificate must be a CA's and the key its own.
func Parse(certDER, keyDER []byte) (*CA, error) {
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("mesh CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("mesh CA certificate: not a CA")
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("mesh CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("mesh CA key: %T, not ECDSA", k)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("mesh CA: the private key does not belong to the certificate")
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Pin is the CA's pin.
func (ca *CA) Pin() string { return Pin(ca.Cert) }

// PEM is the CA's certificate, PEM-encoded.
func (ca *CA) PEM() []byte { return EncodePEM(ca.Cert) }

// Pin is a certificate's pin: "sha256:" and the hex of the SHA-256 of its
// SubjectPublicKeyInfo. It names the key, not the certificate, so a CA
// certificate re-issued for the same key keeps its pin.
func Pin(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParsePin checks a pin's form and returns it in the canonical spelling
// (lower-case hex).
func ParsePin(s string) (string, error) {
	h, ok := strings.CutPrefix(strings.TrimSpace(s), "sha256:")
	if b, err := hex.DecodeString(h); !ok || err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("CA pin %q: want sha256: and 64 hex characters", s)
	}
	return "sha256:" + strings.ToLower(h), nil
}

// EncodePEM is a certificate as PEM.
func EncodePEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// ParsePEM reads one CA certificate from PEM.
func ParsePEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	if !c.IsCA {
		return nil, errors.New("the certificate is not a CA's")
	}
	return c, nil
}

// IssueServing issues a serving certificate for names (host names or IP
// addresses) and LocalNames, valid from now for lifetime. The chain holds
// the CA's certificate after the leaf: a host enrolling finds the pinned
// CA there.
func (ca *CA) IssueServing(names []string, now time.Time, lifetime time.Duration) (*tls.Certificate, error) {
	if lifetime <= 0 {
		lifetime = ServingLifetime
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"mesh"}, CommonName: "mesh-controller"},
		NotBefore:    now.Add(-5 * time.Minute), // a host's clock a little behind
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	seen := map[string]bool{}
	for _, n := range append(append([]string{}, names...), LocalNames...) {
		n = strings.TrimSpace(n)
		if n == "" || seen[strings.ToLower(n)] {
			continue
		}
		seen[strings.ToLower(n)] = true
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// ClientConfig trusts the CA alone, with the ordinary verification of
// chain, expiry and host name: what a host uses once it holds the CA.
func ClientConfig(ca *x509.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: NextProtos}
}

// PinMismatchError is a server whose chain holds no CA with the pin a host
// was given: another CA's certificate, as a TLS-terminating proxy in the
// middle would present.
type PinMismatchError struct {
	Addr     string
	Expected string
	// Seen are the pins of the certificates presented, leaf first; the
	// last is the CA the server's chain ends at.
	Seen []string
}

func (e *PinMismatchError) Error() string {
	seen := "no certificate"
	if n := len(e.Seen); n > 0 {
		seen = e.Seen[n-1]
		if n > 1 {
			seen += fmt.Sprintf(" (the last of %d certificates presented: %s)", n, strings.Join(e.Seen, ", "))
		}
	}
	return fmt.Sprintf("%s is not the controller the pin names: expected CA pin %s, saw %s; "+
		"a TLS proxy in between, or the wrong pin or address", e.Addr, e.Expected, seen)
}

// Discover connects to addr, reads the chain the server presents without
// trusting it, and returns the CA certificate in it whose pin is pin, once
// the server's leaf has been verified against that CA for serverName (a
// host name or IP address). Nothing but a ClientHello is sent: the
// handshake is made with an empty set of roots, so it always stops at the
// verification of the chain, whose certificates the error carries; no
// verification is ever skipped. The caller then makes its requests with
// ClientConfig(ca), verified as usual.
func Discover(ctx context.Context, addr, serverName, pin string) (*x509.Certificate, error) {
	pin, err := ParsePin(pin)
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 30 * time.Second},
		Config: &tls.Config{RootCAs: x509.NewCertPool(), ServerName: serverName, MinVersion: tls.VersionTLS12, NextProtos: NextProtos}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return nil, fmt.Errorf("%s: a chain verified against no roots", addr) // cannot happen
	}
	var cve *tls.CertificateVerificationError
	if !errors.As(err, &cve) {
		return nil, err
	}
	return pinned(addr, serverName, pin, cve.UnverifiedCertificates)
}

// pinned finds the CA with the pin in a presented chain and verifies the
// leaf against it for serverName.
func pinned(addr, serverName, pin string, chain []*x509.Certificate) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, &PinMismatchError{Addr: addr, Expected: pin}
	}
	var ca *x509.Certificate
	seen := make([]string, len(chain))
	forged := false
	for i, c := range chain {
		seen[i] = Pin(c)
		if seen[i] != pin || !c.IsCA || ca != nil {
			continue
		}
		// The pin names a key, and any certificate can carry a public key:
		// only the mesh CA's own certificate is signed by that key itself.
		// One signed by another (made on the path, expiring tomorrow)
		// would be kept as the host's only root.
		if !bytes.Equal(c.RawIssuer, c.RawSubject) || c.CheckSignatureFrom(c) != nil {
			forged = true
			continue
		}
		ca = c
	}
	if ca == nil && forged {
		return nil, fmt.Errorf("%s presented a certificate with the pinned CA key %s that the key did not sign itself: not the mesh CA's own certificate (a connection through someone else?)", addr, pin)
	}
	if ca == nil {
		return nil, &PinMismatchError{Addr: addr, Expected: pin, Seen: seen}
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(ca)
	for _, c := range chain[1:] {
		if !bytes.Equal(c.Raw, ca.Raw) {
			inter.AddCert(c)
		}
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: serverName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Errorf("%s presented the pinned CA %s, but its certificate does not verify against it: %w", addr, pin, err)
	}
	return ca, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}
