package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"strings"
	"testing"
	"time"

	"mesh/meshca"
	"mesh/models"
)

// newCA makes a mesh CA as the controller does.
func newCA(t *testing.T) *meshca.CA {
	t.Helper()
	cd, kd, err := meshca.New(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := meshca.Parse(cd, kd)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// serveTLS serves TLS with a certificate from ca for names until the test ends.
func serveTLS(t *testing.T, ca *meshca.CA, names ...string) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: names[0]}, DNSNames: names}, key)
	csr, _ := x509.ParseCertificateRequest(der)
	_, leaf, err := ca.IssueService(csr, names, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{
		Certificate: [][]byte{leaf.Raw, ca.Cert.Raw}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}(c)
		}
	}()
	return ln.Addr().String()
}

// TestTLSCheck: a tls check passes only when the presented chain verifies
// against the mesh CA for the server name, and a failure says why.
func TestTLSCheck(t *testing.T) {
	mesh, other := newCA(t), newCA(t)
	good := serveTLS(t, mesh, "web.m1.mesh", "web.mesh")
	foreign := serveTLS(t, other, "web.m1.mesh")
	for _, tc := range []struct {
		name, addr, server string
		ca                 *x509.Certificate
		ok                 bool
		detail             string
	}{
		{"OK", good, "web.m1.mesh", mesh.Cert, true, "verified against the mesh CA"},
		{"OK_SecondName", good, "web.mesh", mesh.Cert, true, "web.m1.mesh, web.mesh"},
		{"ErrAnotherCA", foreign, "web.m1.mesh", mesh.Cert, false, "does not verify against the mesh CA: signed by another authority"},
		{"ErrWrongName", good, "db.m1.mesh", mesh.Cert, false, "not valid for db.m1.mesh (it names web.m1.mesh, web.mesh)"},
		{"ErrNoMeshCA", good, "web.m1.mesh", nil, false, "holds no mesh CA"},
		{"ErrNobodyThere", "127.0.0.1:1", "web.m1.mesh", mesh.Cert, false, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCheck(context.Background(), nil, tc.ca, models.Resource{ID: "a.web", Kind: "service",
				Check: &models.Check{TLS: tc.addr, ServerName: tc.server, Timeout: "2s"}})
			if res.ok != tc.ok || !strings.Contains(res.detail, tc.detail) {
				t.Fatalf("= %v %q; want %v saying %q", res.ok, res.detail, tc.ok, tc.detail)
			}
		})
	}
}
