package meshca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Machine certificates: a host makes its key on its machine (it never
// leaves it) and sends a certificate signing request; the CA issues a
// client certificate that names the machine by a URI, and the enrolment
// it belongs to in the subject's serial number, so the one revocation of
// an enrolment (the machine deleted or revoked) refuses every certificate
// it was ever given, as it refuses the host's bearer token.

// MachineLifetime is a machine certificate's default lifetime; the host
// renews it at two thirds.
const MachineLifetime = 30 * 24 * time.Hour

// MachineGrace is how long after its certificate expired a host that was
// offline may still renew it, once, by proving its key in the handshake.
const MachineGrace = 7 * 24 * time.Hour

// MachineURIPrefix starts the URI SAN a machine certificate names its
// machine by.
const MachineURIPrefix = "mesh://machine/"

// MachineURI is the URI SAN of machine name's certificate.
func MachineURI(name string) string { return MachineURIPrefix + name }

// oidSubjectAltName is the one extension a CSR may ask for.
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// NewKey makes a key on the machine, the host's own or a service's:
// ECDSA P-256, like the CA's.
func NewKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// NewCSR is a host's request for machine name's certificate, signed by key;
// NewServiceCSR is the one for a service's DNS names.
func NewCSR(key *ecdsa.PrivateKey, name string) ([]byte, error) {
	u, err := url.Parse(MachineURI(name))
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: name}, URIs: []*url.URL{u}}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// CSRError is a certificate request refused: nothing is issued.
type CSRError struct{ Reason string }

func (e *CSRError) Error() string { return e.Reason }

func csrError(format string, a ...any) error { return &CSRError{Reason: fmt.Sprintf(format, a...)} }

// CheckCSR reads a PEM certificate request and says whether the CA may
// issue machine name's certificate for it: its signature proves the key;
// the key is ECDSA P-256; it names machine name and nothing else (a common
// name, if any, is the name; the only SAN a URI, exactly MachineURI(name));
// and it asks for no extension but that SAN, so no CA flag, key usage or
// other name can be slipped in. The certificate the CA issues is made from
// its own template either way; refusing such a request says loudly that
// someone asked for more.
func CheckCSR(csrPEM []byte, name string) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, csrError("want one PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, csrError("%v", err)
	}
	// The key's kind first: a signature over a key of any other kind (an
	// RSA modulus of 180,000 bits fits a request's 64 KiB) costs the
	// controller a second of CPU to check, for anyone who asks.
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, csrError("the key must be ECDSA P-256, not %T", csr.PublicKey)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, csrError("its signature does not verify: %v", err)
	}
	if cn := csr.Subject.CommonName; cn != "" && cn != name {
		return nil, csrError("it names machine %q, the request is for %q", cn, name)
	}
	// The subject is the machine's name, or nothing: another attribute (an
	// organisation, a serial number naming another enrolment) is asking
	// for more, said loudly even though the template would drop it.
	for _, atv := range csr.Subject.Names {
		if !atv.Type.Equal(oidCommonName) || len(csr.Subject.Names) > 1 {
			return nil, csrError("its subject says more than the machine's name (%s); a machine certificate's subject is its name only", csr.Subject)
		}
	}
	if len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.EmailAddresses) > 0 {
		return nil, csrError("it asks for other names (DNS %v, IP %v, email %v); a machine certificate names its machine only",
			csr.DNSNames, csr.IPAddresses, csr.EmailAddresses)
	}
	for _, u := range csr.URIs {
		if u.String() != MachineURI(name) {
			return nil, csrError("it asks for URI %s; machine %s's certificate names %s only", u, name, MachineURI(name))
		}
	}
	for _, ext := range csr.Extensions {
		if ext.Id.Equal(oidSubjectAltName) {
			// Go reads only the DNS, IP, email and URI names of a SAN;
			// any other kind (an otherName, a directoryName, a
			// registeredID) is a name too, and not the machine's.
			if err := onlyURINames(ext.Value); err != nil {
				return nil, err
			}
			continue
		}
		return nil, csrError("it asks for extension %s (a CA flag, a key usage…); a machine certificate is made "+
			"from the mesh's own template and carries none on request", ext.Id)
	}
	return csr, nil
}

// oidCommonName is a subject's common name (X.520).
var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// onlyURINames refuses a SubjectAltName extension's value holding a name
// of any kind but a URI.
func onlyURINames(value []byte) error {
	var names []asn1.RawValue
	if rest, err := asn1.Unmarshal(value, &names); err != nil || len(rest) > 0 {
		return csrError("its subject alternative names do not parse")
	}
	for _, n := range names {
		if n.Class != asn1.ClassContextSpecific || n.Tag != 6 { // uniformResourceIdentifier [6]
			return csrError("it asks for a subject alternative name of kind [%d]; a machine certificate names its machine's URI only", n.Tag)
		}
	}
	return nil
}

// IssueMachine issues machine name's client certificate for a checked
// request (CheckCSR), for the enrolment whose id is enrolment, valid from
// now for lifetime.
func (ca *CA) IssueMachine(csr *x509.CertificateRequest, name, enrolment string, now time.Time, lifetime time.Duration) (*x509.Certificate, error) {
	if lifetime <= 0 {
		lifetime = MachineLifetime
	}
	u, err := url.Parse(MachineURI(name))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"mesh"}, CommonName: name, SerialNumber: enrolment},
		// Back-dated for a controller's clock a little ahead, by no more
		// than a tenth of the life, so two thirds of it (RenewAt) stays
		// after the issue however short the life.
		NotBefore:   now.Add(-min(5*time.Minute, lifetime/10)),
		NotAfter:    now.Add(lifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{u},
		// BasicConstraintsValid with IsCA false: a leaf, said explicitly.
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// MachineIdentity is what a verified machine certificate says.
type MachineIdentity struct {
	Machine   string
	Enrolment string
	Serial    string // hex
	NotBefore time.Time
	NotAfter  time.Time
	// Expired: past NotAfter, within the grace, where only a renewal is
	// allowed.
	Expired bool
}

// ClientError is a presented client certificate refused. Machine is the
// name it claims (unverified when the chain did not verify), for the
// problem's message and the audit log.
type ClientError struct {
	Machine string
	Reason  string
	// PastGrace: a certificate of this CA whose grace has passed too, so
	// the machine can only be enrolled again; Enrolment is then the one it
	// was issued for.
	PastGrace bool
	Enrolment string
	// Serial is then the certificate's (hex): only the one its machine's
	// host uses says the machine can no longer be reached.
	Serial string
	// Forged: not issued by this CA, so Machine is only what it claims.
	Forged bool
}

func (e *ClientError) Error() string {
	if e.Machine == "" {
		return "client certificate: " + e.Reason
	}
	return fmt.Sprintf("machine %s's client certificate: %s", e.Machine, e.Reason)
}

// VerifyMachine checks a presented chain (leaf first) against the CA:
// signature, client-auth usage and validity at now, where a certificate
// expired at most grace ago verifies with Expired set (the caller lets it
// renew only). It returns the machine and enrolment the certificate names.
func (ca *CA) VerifyMachine(chain []*x509.Certificate, now time.Time, grace time.Duration) (*MachineIdentity, error) {
	if len(chain) == 0 {
		return nil, &ClientError{Reason: "none presented"}
	}
	leaf := chain[0]
	claimed := machineOf(leaf)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	// The chain first, as it stood when the certificate was last valid:
	// only a certificate of this CA says anything about the machine it
	// names, so one that does not chain to it is forged whatever its
	// dates (keyed by its sender's address, never by the name it claims).
	expired := now.After(leaf.NotAfter)
	early := now.Before(leaf.NotBefore)
	at := now
	switch {
	case expired:
		at = leaf.NotAfter
	case early:
		// Not valid yet on this clock: judged as it stands from its
		// start, so one of this CA issued by an instance whose clock is
		// ahead of this one's is refused for what it is, not as forged.
		at = leaf.NotBefore
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, &ClientError{Machine: claimed, Forged: true, Reason: "not issued by this mesh's CA (" + ca.Pin() + "): " + err.Error()}
	}
	if early {
		return nil, &ClientError{Machine: claimed, Enrolment: leaf.Subject.SerialNumber, Serial: leaf.SerialNumber.Text(16),
			Reason: fmt.Sprintf("issued by this mesh's CA but valid only from %s, after this controller's clock (%s): "+
				"the clock of the instance that issued it is ahead of this one's; keep the instances' clocks together (NTP)",
				leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}
	}
	if expired && now.Sub(leaf.NotAfter) > grace {
		return nil, &ClientError{Machine: claimed, PastGrace: true, Enrolment: leaf.Subject.SerialNumber, Serial: leaf.SerialNumber.Text(16),
			Reason: fmt.Sprintf("expired at %s, past the renewal grace of %s; enrol the machine again", leaf.NotAfter.UTC().Format(time.RFC3339), grace)}
	}
	if claimed == "" || leaf.Subject.SerialNumber == "" {
		return nil, &ClientError{Reason: "names no machine"}
	}
	return &MachineIdentity{Machine: claimed, Enrolment: leaf.Subject.SerialNumber, Serial: leaf.SerialNumber.Text(16), NotBefore: leaf.NotBefore,
		NotAfter: leaf.NotAfter, Expired: expired}, nil
}

// machineOf is the machine a certificate's URI SAN names ("" for none, or
// for a name no machine can have: a forged certificate's claim goes into
// the audit log and the refusal's message, and must not bring kilobytes
// of its own there).
func machineOf(c *x509.Certificate) string {
	for _, u := range c.URIs {
		if name, ok := strings.CutPrefix(u.String(), MachineURIPrefix); ok && name != "" {
			if !nameShaped(name) {
				return ""
			}
			return name
		}
	}
	return ""
}

// nameShaped: at most 63 characters of a-z, 0-9, '.', '_' and '-', the
// characters of a machine's name (models.ValidName has the whole rule;
// this package uses the standard library only).
func nameShaped(s string) bool {
	if len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// CAStatement is what the declaration key signs to vouch for the CA (PEM)
// to a host that trusts only that key (one enrolled over plain HTTP).
func CAStatement(caPEM []byte) []byte { return append([]byte("mesh-ca/v1\n"), caPEM...) }

// RenewAt is when a certificate should be renewed: two thirds into its life.
func RenewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

// ErrNoCertificate says a PEM bundle holds no certificate.
var ErrNoCertificate = errors.New("no PEM certificate")

// ParseCertificatePEM reads one certificate (a leaf or a CA) from PEM.
func ParseCertificatePEM(b []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, ErrNoCertificate
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}
