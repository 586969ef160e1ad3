package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"mesh/meshca"
)

// A host enrolled over plain HTTP moves to TLS by itself (no flag day).
// A controller that serves TLS answers its plain polls with X-Mesh-TLS
// (its https:// address); the host then, over the plain URL it has, only
// fetches the mesh CA, which it trusts because the declaration key it
// has trusted since enrolment signed it; over TLS, verified against that
// CA, it asks for its machine certificate with its token; it rewrites its
// URLs to https:// in host.json and goes on over TLS. A plain loopback
// controller sends no X-Mesh-TLS, and its hosts stay as they are.

// moveToTLS moves the host to TLS; a failure is logged and tried again at
// a later poll (at most once a minute).
func (a *Agent) moveToTLS(ctx context.Context, hint string) {
	if time.Now().Before(a.moveNext) {
		return
	}
	if err := a.tryMoveToTLS(ctx, hint); err != nil {
		a.moveNext = time.Now().Add(time.Minute)
		a.cfg.Log.Warn("the controller serves TLS; moving there failed, staying on plain HTTP for now", "tls", hint, "err", err)
	}
}

func (a *Agent) tryMoveToTLS(ctx context.Context, hint string) error {
	ca, pemCA, err := a.client.fetchCA(ctx, a.id.Keys)
	if err != nil {
		return err
	}
	if u, err := url.Parse(hint); err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("X-Mesh-TLS %q: not an https:// address", hint)
	}
	// Every URL moves to https:// on its own host and port, where the
	// controller serves both: the header is only a signal, so one
	// injected over plain HTTP cannot send the host elsewhere.
	var urls []string
	for _, u := range a.client.urls() {
		urls = append(urls, strings.Replace(u, "http://", "https://", 1))
	}
	rt := newTransport(ca, a.id.certs)
	tlsClient := &client{id: a.id, route: &route{}, http: &http.Client{Transport: rt}}
	tlsClient.route.urls.Store(&urls)
	tlsClient.cur = a.client.cur
	tlsClient.route.rt.Store(rt)
	// A certificate asked for over the new route proves it before any
	// URL is rewritten: the controller there holds the CA's certificate,
	// and knows this host.
	if _, err := tlsClient.renewCertificate(ctx, a.id.certs); err != nil {
		return err
	}
	nid := *a.id
	nid.CA, nid.CAPin, nid.Controllers = string(pemCA), meshca.Pin(ca), urls
	if err := writeJSONAtomic(identityPath(a.cfg.StateDir), &nid, 0o600); err != nil {
		return err
	}
	old := a.client.route.rt.Load()
	a.client.route.rt.Store(rt)
	a.client.route.urls.Store(&urls)
	old.CloseIdleConnections()
	a.cfg.Log.Info("moved to TLS: the controller's certificate is verified against the mesh CA, signed by the declaration key this host trusts",
		"ca_pin", meshca.Pin(ca), "controllers", strings.Join(urls, ","))
	return nil
}

// fetchCA reads the mesh CA from the controller in use and checks that a
// declaration key the host trusts signed it.
func (c *client) fetchCA(ctx context.Context, keys []PublicKey) (*x509.Certificate, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base()+"/api/v1/host/ca", nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.id.Token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("GET /api/v1/host/ca: %s: %s", resp.Status, problemDetail(b))
	}
	var v struct {
		Certificate string `json:"certificate"`
		KeyID       string `json:"key_id"`
		Signature   []byte `json:"signature"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, nil, err
	}
	signed := false
	for _, k := range keys {
		if k.KeyID == v.KeyID && len(k.PublicKey) == ed25519.PublicKeySize &&
			ed25519.Verify(ed25519.PublicKey(k.PublicKey), meshca.CAStatement([]byte(v.Certificate)), v.Signature) {
			signed = true
		}
	}
	if !signed {
		return nil, nil, errors.New("the mesh CA offered is not signed by a declaration key this host trusts: not moving")
	}
	ca, err := meshca.ParsePEM([]byte(v.Certificate))
	if err != nil {
		return nil, nil, err
	}
	return ca, []byte(v.Certificate), nil
}
