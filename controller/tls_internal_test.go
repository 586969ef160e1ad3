package controller

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mesh/meshca"
)

func TestServesTLS(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		cfg  Config
		tls  bool
		err  bool
	}{
		{"LoopbackPlainByDefault", Config{Listen: "127.0.0.1:8080"}, false, false},
		{"LoopbackV6", Config{Listen: "[::1]:8080"}, false, false},
		{"Localhost", Config{Listen: "localhost:8080"}, false, false},
		{"LoopbackWithTLS", Config{Listen: "127.0.0.1:8080", TLS: true}, true, false},
		{"EverywhereTLSByDefault", Config{Listen: ":8080"}, true, false},
		{"UnspecifiedTLSByDefault", Config{Listen: "0.0.0.0:8080"}, true, false},
		{"AddressTLSByDefault", Config{Listen: "10.0.0.5:8080"}, true, false},
		{"InsecureHTTP", Config{Listen: "10.0.0.5:8080", InsecureHTTP: true}, false, false},
		{"ErrTLSAndInsecure", Config{Listen: "10.0.0.5:8080", InsecureHTTP: true, TLS: true}, false, true},
		{"ErrCertWithoutKey", Config{Listen: "10.0.0.5:8080", TLSCertFile: "c.pem"}, false, true},
		{"LoopbackWithACME", Config{Listen: "127.0.0.1:8443", ACME: ACME{Domains: []string{"mesh.example.net"}}}, true, false},
		{"ErrACMEAndCert", Config{Listen: ":443", TLSCertFile: "c.pem", TLSKeyFile: "k.pem", ACME: ACME{Domains: []string{"mesh.example.net"}}}, false, true},
		{"BearerWindowWithTLS", Config{Listen: "10.0.0.5:8080", HostBearerUntil: time.Now()}, true, false},
		{"ErrBearerWindowOnPlain", Config{Listen: "127.0.0.1:8080", HostBearerUntil: time.Now()}, false, true},
		{"ErrBearerWindowInsecure", Config{Listen: "10.0.0.5:8080", InsecureHTTP: true, HostBearerUntil: time.Now()}, false, true},
		{"ErrACMEAndInsecure", Config{Listen: ":443", InsecureHTTP: true, ACME: ACME{Domains: []string{"mesh.example.net"}}}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Log = log
			got, err := servesTLS(tc.cfg)
			if (err != nil) != tc.err || got != tc.tls {
				t.Fatalf("tls %v, err %v; want tls %v, err %v", got, err, tc.tls, tc.err)
			}
		})
	}
}

func TestEnrolURL(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4zero, Port: 8443}
	for _, tc := range []struct {
		cfg  Config
		tls  bool
		want string
	}{
		{Config{Listen: ":8443", Advertise: []string{"ctl.example.net", "10.0.0.5"}}, true, "https://ctl.example.net:8443"},
		{Config{Listen: ":8443", Advertise: []string{"fd00::5"}}, true, "https://[fd00::5]:8443"},
		{Config{Listen: "10.0.0.5:8443"}, true, "https://10.0.0.5:8443"},
		{Config{Listen: "0.0.0.0:8443"}, true, ""},
		{Config{Listen: "127.0.0.1:8443"}, false, "http://127.0.0.1:8443"},
	} {
		if got := enrolURL(tc.cfg, tc.tls, addr); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

// TestServing_OperatorCertificateBySNI: with --tls-cert, a client asking
// for a name the operator's certificate covers gets it (the dashboard's
// public name); the advertised names, an address and no SNI get the mesh
// CA's, so hosts keep verifying against their pin.
func TestServing_OperatorCertificateBySNI(t *testing.T) {
	ca := mustCA(t)
	public := mustCA(t) // stands for a public CA
	op, err := public.IssueServing([]string{"dash.example.net", "*.example.net"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	keyDER, err := x509.MarshalPKCS8PrivateKey(op.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: op.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := newServing(ca, Config{Advertise: []string{"mesh.example.net"}, TLSCertFile: certFile, TLSKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	for sni, wantOperator := range map[string]bool{"dash.example.net": true, "other.example.net": true,
		"mesh.example.net": false, "": false, "localhost": false, "elsewhere.test": false} {
		c, err := s.certificate(&tls.ClientHelloInfo{ServerName: sni})
		if err != nil {
			t.Fatal(err)
		}
		if got := c == s.operator; got != wantOperator {
			t.Errorf("SNI %q: operator's certificate %v, want %v", sni, got, wantOperator)
		}
	}
}

func TestServing_RenewedAtTwoThirds(t *testing.T) {
	s, err := newServing(mustCA(t), Config{CertLifetime: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	leaf := s.mesh.Load().Leaf
	twoThirds := leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)
	if s.due(twoThirds.Add(-time.Minute)) {
		t.Fatal("due before two thirds of its life")
	}
	if !s.due(twoThirds.Add(time.Minute)) {
		t.Fatal("not due after two thirds of its life")
	}
}

func mustCA(t *testing.T) *meshca.CA {
	t.Helper()
	c, k, err := meshca.New(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := meshca.Parse(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
