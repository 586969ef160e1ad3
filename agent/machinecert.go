package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"mesh/meshca"
)

// The machine's client certificate. Its key is made on the machine and
// never leaves it: enrolment sends a certificate request (CSR), the
// controller answers with the certificate, and both are kept in
// machine.pem (mode 0600), written atomically so the key and its
// certificate never part. The host renews at two thirds of the
// certificate's life, with a new key, over the same channel (the request
// authenticated by the current certificate); a host that was offline past
// expiry renews the same way within the controller's grace, once — its
// handshake proves the old key.

func machinePEMPath(stateDir string) string { return filepath.Join(stateDir, "machine.pem") }

// certKeeper holds the machine certificate the host presents; nil inside
// until it has one. Both of the agent's clients present the same.
type certKeeper struct {
	stateDir string
	cur      atomic.Pointer[tls.Certificate]
}

// load reads machine.pem; a missing file is no certificate.
func (k *certKeeper) load() error {
	b, err := os.ReadFile(machinePEMPath(k.stateDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	c, err := tls.X509KeyPair(b, b)
	if err != nil {
		return fmt.Errorf("%s: %w", machinePEMPath(k.stateDir), err)
	}
	k.cur.Store(&c)
	return nil
}

// save keeps a new key and its certificate (PEM) and presents them from
// now on.
func (k *certKeeper) save(key *ecdsa.PrivateKey, certPEM []byte) (*x509.Certificate, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	leaf, err := meshca.ParseCertificatePEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the controller's certificate: %w", err)
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("the controller's certificate is not for the key this host asked with")
	}
	var b bytes.Buffer
	b.Write(certPEM)
	_ = pem.Encode(&b, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	c, err := tls.X509KeyPair(b.Bytes(), b.Bytes())
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(machinePEMPath(k.stateDir), b.Bytes(), 0o600); err != nil {
		return nil, err
	}
	k.cur.Store(&c)
	return leaf, nil
}

// leaf is the certificate presented now (nil: none).
func (k *certKeeper) leaf() *x509.Certificate {
	if k == nil {
		return nil
	}
	c := k.cur.Load()
	if c == nil {
		return nil
	}
	if c.Leaf != nil {
		return c.Leaf
	}
	l, _ := x509.ParseCertificate(c.Certificate[0])
	return l
}

// present is the TLS client's GetClientCertificate: the current
// certificate, or none.
func (k *certKeeper) present(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if c := k.cur.Load(); c != nil {
		return c, nil
	}
	return &tls.Certificate{}, nil
}

// newCSR makes a fresh key and a request for machine's certificate.
func newCSR(machine string) (*ecdsa.PrivateKey, []byte, error) {
	key, err := meshca.NewKey()
	if err != nil {
		return nil, nil, err
	}
	csr, err := meshca.NewCSR(key, machine)
	return key, csr, err
}

// renewDue says whether the host should ask for a new certificate now:
// past two thirds of the current one's life (or past its end).
func renewDue(leaf *x509.Certificate, now time.Time) bool {
	return leaf != nil && now.After(meshca.RenewAt(leaf))
}

// renewCertificate asks the controller in use for a new certificate for
// a new key, authenticated by the current one.
func (c *client) renewCertificate(ctx context.Context, keeper *certKeeper) (*x509.Certificate, error) {
	key, csr, err := newCSR(c.id.Machine)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(map[string]string{"csr": string(csr)})
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", c.base()+"/api/v1/host/certificate", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if keeper.leaf() == nil {
		req.Header.Set("Authorization", "Bearer "+c.id.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errSwitch, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("renewing the machine certificate at %s: %s: %s", c.base(), resp.Status, problemDetail(b))
	}
	var out struct {
		Certificate string `json:"certificate"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	cert, err := keeper.save(key, []byte(out.Certificate))
	if err == nil {
		// The next request handshakes with it: a kept connection goes on
		// presenting what it presented when it was made.
		c.http.CloseIdleConnections()
	}
	return cert, err
}

// renew renews the machine certificate when it is due, at most once a
// minute while the controller refuses, and not again before the host has
// held the new one for half its life, on the monotonic clock: due is
// judged by the host's wall clock against the certificate's dates, and a
// host whose clock is ahead of the controller's by more than a third of
// the lifetime found each new certificate due the moment it came, and
// renewed at every turn of its loop (a signature, store writes and audit
// rows each time). Service certificates are judged by how long they were
// held for the same reason. One expired on the host's wall clock is asked
// for at once all the same (at most once a minute): the monotonic clock
// stops while a machine is suspended, and a laptop or instance that slept
// past its certificate's end would otherwise wait out half a lifetime of
// waking time, past the controller's grace, refused meanwhile.
func (a *Agent) renew(ctx context.Context) {
	now := time.Now()
	leaf := a.id.certs.leaf()
	// A host on TLS with no certificate yet (enrolled over TLS before
	// machine certificates) asks for its first with its token.
	due := leaf == nil || renewDue(leaf, now)
	next := a.renewNext
	if leaf != nil && now.After(leaf.NotAfter) {
		next = a.renewTried.Add(time.Minute)
	}
	if !due || now.Before(next) || !strings.HasPrefix(a.client.base(), "https://") {
		return
	}
	a.renewTried = now
	cert, err := a.client.renewCertificate(ctx, a.id.certs)
	if err != nil {
		a.renewNext = now.Add(time.Minute)
		a.cfg.Log.Warn("the machine certificate is due and was not renewed; retrying", "has_one", leaf != nil, "err", err)
		return
	}
	a.renewNext = now.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
	a.cfg.Log.Info("machine certificate renewed", "serial", cert.SerialNumber.Text(16), "not_after", cert.NotAfter)
}
