package controller_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"

	"mesh/controller"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
)

// netDialer gives the first handshake of the ACME name time to order its
// certificate.
var netDialer = net.Dialer{Timeout: time.Minute}

// startPebble runs Let's Encrypt's test ACME server in process and returns
// its directory URL, a PEM file trusting its own TLS, and the root its
// certificates chain to. Its validation authority is told to find every
// challenge valid (PEBBLE_VA_ALWAYS_VALID): the test machine has no public
// DNS name to point at the controller, and answering the TLS-ALPN-01
// challenge is autocert's part, not the controller's.
func startPebble(t *testing.T) (dir, caFile string, root *x509.Certificate) {
	t.Helper()
	t.Setenv("PEBBLE_VA_ALWAYS_VALID", "1")
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	logger := log.New(io.Discard, "", 0)
	mem := db.NewMemoryStore()
	authority := ca.New(logger, mem, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "default"}})
	validator := va.New(logger, 0, 0, false, "", mem)
	front := wfe.New(logger, mem, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	srv := httptest.NewTLSServer(front.Handler())
	t.Cleanup(srv.Close)
	caFile = filepath.Join(t.TempDir(), "pebble-tls.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL + "/dir", caFile, authority.GetRootCert(0).Cert
}

// TestACME_DashboardCertificateFromAnACMECA: with --acme-domain, a client
// asking for that name is answered with a certificate the ACME CA issued
// (ordered on the first such handshake, cached in the data directory),
// while hosts — the advertised names, an IP address, no SNI — keep the
// mesh CA's.
func TestACME_DashboardCertificateFromAnACMECA(t *testing.T) {
	dir, caFile, root := startPebble(t)
	sc := storetest.Config(t, store.SQLite)
	const name = "mesh.example.test"
	c, err := controller.Start(context.Background(), controller.Config{Listen: "127.0.0.1:0", DataDir: sc.DataDir,
		DatabaseURL: sc.DatabaseURL, Out: io.Discard, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DrainTimeout: 5 * time.Second, ACME: controller.ACME{Domains: []string{name}, Directory: dir, CAFile: caFile}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if !c.TLS {
		t.Fatal("--acme-domain on loopback serves no TLS")
	}

	roots := x509.NewCertPool()
	roots.AddCert(root)
	conn, err := tls.DialWithDialer(&netDialer, "tcp", c.Addr.String(), &tls.Config{ServerName: name, RootCAs: roots})
	if err != nil {
		t.Fatalf("a client of %s, trusting the ACME CA alone: %v", name, err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if leaf.VerifyHostname(name) != nil {
		t.Fatalf("certificate for %v; want %s", leaf.DNSNames, name)
	}
	if _, err := os.Stat(filepath.Join(sc.DataDir, "acme", name)); err != nil {
		t.Fatalf("the certificate is not cached in the data directory: %v", err)
	}

	// The host protocol's names keep the mesh CA.
	for _, sni := range []string{"localhost", ""} {
		conf := meshca.ClientConfig(c.CA.Cert)
		conf.ServerName = sni
		if sni == "" {
			conf.ServerName = "127.0.0.1"
		}
		conn, err := tls.DialWithDialer(&netDialer, "tcp", c.Addr.String(), conf)
		if err != nil {
			t.Fatalf("a host (SNI %q) against the mesh CA: %v", sni, err)
		}
		conn.Close()
	}
}
