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
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"mesh/meshca"
)

func csrPEM(t *testing.T, key any, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// spoiled is a PEM request with its signature's last byte changed.
func spoiled(p []byte) []byte {
	block, _ := pem.Decode(p)
	block.Bytes[len(block.Bytes)-1] ^= 0xff
	return pem.EncodeToMemory(block)
}

// TestCheckCSR: a request names its machine and nothing else; every other
// ask is refused with what it asked for.
func TestCheckCSR(t *testing.T) {
	key, _ := meshca.NewKey()
	own, _ := url.Parse(meshca.MachineURI("m1"))
	other, _ := url.Parse(meshca.MachineURI("m2"))
	bc, _ := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{true})
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	good, err := meshca.NewCSR(key, "m1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		csr  []byte
		want string
	}{
		{"OK", good, ""},
		{"OK_NoNames", csrPEM(t, key, &x509.CertificateRequest{}), ""},
		{"ErrAnotherMachinesName", csrPEM(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "m2"}}), `names machine "m2"`},
		{"ErrAnotherMachinesURI", csrPEM(t, key, &x509.CertificateRequest{URIs: []*url.URL{other}}), "asks for URI mesh://machine/m2"},
		{"ErrExtraURI", csrPEM(t, key, &x509.CertificateRequest{URIs: []*url.URL{own, other}}), "asks for URI mesh://machine/m2"},
		{"ErrDNSName", csrPEM(t, key, &x509.CertificateRequest{URIs: []*url.URL{own}, DNSNames: []string{"ctl.example"}}), "asks for other names"},
		{"ErrIP", csrPEM(t, key, &x509.CertificateRequest{IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}), "asks for other names"},
		{"ErrCAFlag", csrPEM(t, key, &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: bc}}}), "asks for extension 2.5.29.19"},
		{"ErrKeyNotP256", csrPEM(t, p384, &x509.CertificateRequest{}), "ECDSA P-256"},
		// The key's kind is refused before its signature is checked: a
		// signature over a huge RSA key costs a second to check.
		{"ErrKeyNotP256_SignatureUnchecked", spoiled(csrPEM(t, rsaKey, &x509.CertificateRequest{})), "ECDSA P-256"},
		{"ErrNotPEM", []byte("hello"), "want one PEM CERTIFICATE REQUEST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := meshca.CheckCSR(tc.csr, "m1")
			var ce *meshca.CSRError
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want a CSRError saying %q", err, tc.want)
			}
		})
	}
}

// TestVerifyMachine: a certificate the CA issued names its machine and
// enrolment; one of another CA, or past the grace, is refused; one in the
// grace verifies as expired (renewal only).
func TestVerifyMachine(t *testing.T) {
	ca, other := mustCA(t), mustCA(t)
	key, _ := meshca.NewKey()
	req, _ := meshca.NewCSR(key, "m1")
	csr, err := meshca.CheckCSR(req, "m1")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cert, err := ca.IssueMachine(csr, "m1", "enrol-1", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if cert.IsCA || len(cert.URIs) != 1 || cert.URIs[0].String() != "mesh://machine/m1" || len(cert.DNSNames) > 0 {
		t.Fatalf("issued %+v", cert)
	}
	forged, _ := other.IssueMachine(csr, "m1", "enrol-1", now, time.Hour)

	id, err := ca.VerifyMachine([]*x509.Certificate{cert}, now, time.Hour)
	if err != nil || id.Machine != "m1" || id.Enrolment != "enrol-1" || id.Expired {
		t.Fatalf("verify: %+v %v", id, err)
	}
	if _, err := ca.VerifyMachine([]*x509.Certificate{forged}, now, time.Hour); err == nil || !strings.Contains(err.Error(), "not issued by this mesh's CA") {
		t.Fatalf("another CA's certificate: %v", err)
	}
	id, err = ca.VerifyMachine([]*x509.Certificate{cert}, now.Add(90*time.Minute), time.Hour)
	if err != nil || !id.Expired {
		t.Fatalf("in the grace: %+v %v", id, err)
	}
	_, err = ca.VerifyMachine([]*x509.Certificate{cert}, now.Add(3*time.Hour), time.Hour)
	var ce *meshca.ClientError
	if !errors.As(err, &ce) || !ce.PastGrace || ce.Machine != "m1" {
		t.Fatalf("past the grace: %v", err)
	}
	_, err = ca.VerifyMachine([]*x509.Certificate{forged}, now.Add(3*time.Hour), time.Hour)
	if !errors.As(err, &ce) || ce.PastGrace {
		t.Fatalf("another CA's, past the grace, must not mark the machine: %v", err)
	}
}
