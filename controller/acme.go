package controller

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"
)

// ACME gives the dashboard and API a public CA's certificate obtained by
// ACME (RFC 8555), instead of an operator's --tls-cert file: the names in
// Domains are answered with it, every other name (the advertised ones
// hosts use, IP addresses, no SNI) with the mesh CA's. Challenges are
// TLS-ALPN-01 on the listener itself, so the controller must be reachable
// on port 443 under those names by the ACME CA.
type ACME struct {
	// Domains are the public names to get a certificate for.
	Domains []string
	// Directory is the ACME directory URL (default Let's Encrypt's).
	Directory string
	// Email is the account's contact (optional).
	Email string
	// CAFile trusts a private ACME server's TLS certificate (step-ca, a
	// company's own); empty: the system's roots.
	CAFile string
}

// on says whether ACME is asked for.
func (a ACME) on() bool { return len(a.Domains) > 0 }

// acmeManager is the autocert manager of cfg.ACME: its account key and
// certificates are cached in the data directory (acme/, mode 0700), so a
// restart does not order again; each replica keeps its own.
func acmeManager(cfg Config) (*autocert.Manager, error) {
	a := cfg.ACME
	for _, d := range a.Domains {
		if d == "" || strings.ContainsAny(d, "/: *") || slices.Contains(cfg.Advertise, d) {
			return nil, fmt.Errorf("--acme-domain %q: a public host name, not an advertised one (hosts keep the mesh CA for those)", d)
		}
	}
	client := &acme.Client{DirectoryURL: a.Directory, UserAgent: "mesh-controller"}
	if client.DirectoryURL == "" {
		client.DirectoryURL = autocert.DefaultACMEDirectory
	}
	if a.CAFile != "" {
		pem, err := os.ReadFile(a.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--acme-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--acme-ca-file %s: no PEM certificate in it", a.CAFile)
		}
		client.HTTPClient = &http.Client{Timeout: time.Minute, Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	if cfg.DataDir == "" {
		return nil, errors.New("--acme-domain needs a data directory for its account and certificates")
	}
	return &autocert.Manager{
		Prompt:     autocert.AcceptTOS,
		Cache:      autocert.DirCache(filepath.Join(cfg.DataDir, "acme")),
		HostPolicy: autocert.HostWhitelist(a.Domains...),
		Client:     client,
		Email:      a.Email,
	}, nil
}
