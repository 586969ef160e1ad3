package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"mesh/meshca"
	"mesh/version"
)

// Identity is what enrolment gave the host: its machine name, token, the
// controller URLs to try in turn, and the controller's public keys (its
// trust root). Kept in host.json, mode 0600.
type Identity struct {
	Machine     string      `json:"machine"`
	Token       string      `json:"token"`
	Controllers []string    `json:"controllers"`
	Keys        []PublicKey `json:"keys"`
	// CA is the mesh CA's certificate (PEM), found at enrolment in the
	// controller's chain by its pin (CAPin); every later request to an
	// https:// controller is verified against it alone.
	CA    string `json:"ca,omitempty"`
	CAPin string `json:"ca_pin,omitempty"`

	ca    *x509.Certificate // CA, parsed
	certs *certKeeper       // the machine certificate (machine.pem), if any
}

// PublicKey is a controller declaration key the host trusts.
type PublicKey struct {
	KeyID     string `json:"key_id"`
	PublicKey []byte `json:"public_key"`
}

// SchemaHeader is the declaration schemas this host decodes (X-Mesh-Schema).
// Schema 2 adds the certificate resource and the tls check.
const SchemaHeader = "1,2"

func identityPath(stateDir string) string { return filepath.Join(stateDir, "host.json") }

// LoadIdentity reads host.json.
func LoadIdentity(stateDir string) (*Identity, error) {
	var id Identity
	if err := readJSON(identityPath(stateDir), &id); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s has no host.json: run `mesh-host enroll` first", stateDir)
		}
		return nil, err
	}
	if id.Machine == "" || id.Token == "" || len(id.Controllers) == 0 || len(id.Keys) == 0 {
		return nil, fmt.Errorf("%s: incomplete host.json", stateDir)
	}
	if id.CA != "" {
		ca, err := meshca.ParsePEM([]byte(id.CA))
		if err != nil {
			return nil, fmt.Errorf("%s: host.json's CA: %w", stateDir, err)
		}
		id.ca = ca
	}
	id.certs = &certKeeper{stateDir: stateDir}
	if err := id.certs.load(); err != nil {
		return nil, err
	}
	for _, u := range id.Controllers {
		if strings.HasPrefix(u, "https://") && id.ca == nil {
			return nil, fmt.Errorf("%s: host.json names %s but holds no CA to verify it by: enrol again with --ca-pin", stateDir, u)
		}
	}
	return &id, nil
}

// Enrolment is what `mesh-host enroll` is given.
type Enrolment struct {
	// Controllers are tried in turn; each https:// one must present the
	// pinned CA.
	Controllers []string
	JoinToken   string
	// CAPin is the mesh CA's pin (sha256:…), given with the join token.
	// An https:// controller needs it; a plain http:// one must be on
	// loopback, and takes none.
	CAPin    string
	Name     string
	StateDir string
}

// checkURLs refuses, before anything is sent, a URL that would expose the
// join token: http:// anywhere but loopback, https:// without a pin (no
// trust on first use), a pin with http://.
func (e Enrolment) checkURLs() ([]*url.URL, error) {
	var us []*url.URL
	for _, raw := range e.Controllers {
		u, err := url.Parse(strings.TrimRight(strings.TrimSpace(raw), "/"))
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("controller URL %q: want http(s)://host:port", raw)
		}
		switch u.Scheme {
		case "https":
			if e.CAPin == "" {
				return nil, fmt.Errorf("%s: an https:// controller needs --ca-pin (given with the join token): "+
					"the host trusts no certificate it was not told of", u.Redacted())
			}
		case "http":
			if e.CAPin != "" {
				return nil, fmt.Errorf("%s: --ca-pin is given but the URL is plain http://; use https://", u.Redacted())
			}
			if !loopbackHost(u.Hostname()) {
				return nil, fmt.Errorf("refusing %s: plain HTTP to a controller that is not on this machine would send the join token "+
					"and every later request in the clear; use the https:// URL and --ca-pin the join token came with", u.Redacted())
			}
		default:
			return nil, fmt.Errorf("controller URL %q: want http(s)://host:port", raw)
		}
		us = append(us, u)
	}
	return us, nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// hostPort is u's address with the scheme's port when it names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// Enroll spends a join token with the first controller that answers and
// keeps what it gave in the state dir. With an https:// controller the
// pinned CA is found in its chain and its certificate verified against it
// before the token is sent (meshca.Discover); a chain of another CA is
// refused, saying which pin was expected and which was seen.
func Enroll(ctx context.Context, e Enrolment) (_ *Identity, err error) {
	if len(e.Controllers) == 0 {
		return nil, errors.New("no controller URL given")
	}
	if e.CAPin != "" {
		pin, err := meshca.ParsePin(e.CAPin)
		if err != nil {
			return nil, err
		}
		e.CAPin = pin
	}
	urls, err := e.checkURLs()
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(e.StateDir)
	if err := os.MkdirAll(e.StateDir, 0o700); err != nil {
		return nil, err
	}
	if os.IsNotExist(statErr) {
		// Made here: a refused enrolment leaves nothing behind (Remove
		// takes only an empty directory, so nothing written is lost).
		defer func() {
			if err != nil {
				_ = os.Remove(e.StateDir)
			}
		}()
	}
	if _, err := os.Stat(identityPath(e.StateDir)); err == nil {
		return nil, fmt.Errorf("%s is already enrolled (host.json exists); to enrol this machine again (its machine was revoked or deleted), stop the host, remove %s, run this again, then start the host", e.StateDir, identityPath(e.StateDir))
	}
	// What is written once the controller answers is checked before the
	// join token is sent: a failure after it, the single-use token spent
	// and the name taken, left a machine no host holds credentials for.
	if _, err := LoadState(e.StateDir); err != nil {
		return nil, fmt.Errorf("the state dir's state.json cannot be read (%v): nothing was sent and the join token is unspent; move it aside and run this again", err)
	}
	if err := probeWrite(e.StateDir, minProbe); err != nil {
		return nil, fmt.Errorf("the state dir %s takes no writes (%v): nothing was sent and the join token is unspent", e.StateDir, err)
	}
	fields := map[string]string{"join_token": e.JoinToken, "name": e.Name, "os": runtime.GOOS,
		"arch": runtime.GOARCH, "host_version": version.Version, "schema": SchemaHeader}
	// Over TLS the machine asks for its certificate: its key is made here
	// and never leaves the machine.
	key, csr, err := newCSR(e.Name)
	if err != nil {
		return nil, err
	}
	cas, discoverErrs, err := discoverAll(ctx, urls, e.CAPin)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for i, u := range urls {
		if u.Scheme == "https" {
			fields["csr"] = string(csr)
		} else {
			delete(fields, "csr")
		}
		body, _ := json.Marshal(fields)
		hc := &http.Client{Timeout: 30 * time.Second}
		ca := cas[i]
		if u.Scheme == "https" {
			if ca == nil {
				lastErr = discoverErrs[i]
				continue
			}
			hc.Transport = &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: meshca.ClientConfig(ca)}
		}
		req, err := http.NewRequestWithContext(ctx, "POST", u.String()+"/api/v1/enroll", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return nil, fmt.Errorf("enroll at %s: %s: %s", u, resp.Status, problemDetail(b))
		}
		var out struct {
			Machine     string      `json:"machine"`
			Token       string      `json:"token"`
			Keys        []PublicKey `json:"keys"`
			Certificate string      `json:"certificate"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("enroll at %s: %w", u, err)
		}
		for _, k := range out.Keys {
			if len(k.PublicKey) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("enroll at %s: key %s is not an ed25519 public key", u, k.KeyID)
			}
		}
		id := &Identity{Machine: out.Machine, Token: out.Token, Keys: out.Keys, ca: ca, certs: &certKeeper{stateDir: e.StateDir}}
		if ca != nil {
			id.CA, id.CAPin = string(meshca.EncodePEM(ca)), e.CAPin
		}
		if out.Certificate != "" {
			if _, err := id.certs.save(key, []byte(out.Certificate)); err != nil {
				return nil, fmt.Errorf("enroll at %s: %w", u, err)
			}
		}
		for _, c := range urls {
			id.Controllers = append(id.Controllers, c.String())
		}
		if err := enrolled(e.StateDir, out.Machine); err != nil {
			return nil, err
		}
		if err := writeJSONAtomic(identityPath(e.StateDir), id, 0o600); err != nil {
			return nil, err
		}
		// The service manager starts the stable path (the unit's
		// ExecStart): it names this binary until the mesh moves the
		// launcher to a release.
		if self, err := os.Executable(); err == nil {
			if err := EnsureStablePath(e.StateDir, self); err != nil {
				return nil, fmt.Errorf("making the stable path: %w", err)
			}
		}
		return id, nil
	}
	return nil, fmt.Errorf("no controller answered: %w", lastErr)
}

// discoverAll finds the pinned CA in the chain of every https:// controller
// of the list before the token goes to any: the list is one mesh, so one
// that presents another CA (a proxy in the middle, a wrong address) is
// refused outright. One that does not answer now is verified against the
// same CA when the host first uses it.
func discoverAll(ctx context.Context, urls []*url.URL, pin string) ([]*x509.Certificate, []error, error) {
	cas, errs := make([]*x509.Certificate, len(urls)), make([]error, len(urls))
	for i, u := range urls {
		if u.Scheme != "https" {
			continue
		}
		cas[i], errs[i] = meshca.Discover(ctx, hostPort(u), u.Hostname(), pin)
		var mismatch *meshca.PinMismatchError
		if errors.As(errs[i], &mismatch) {
			return nil, nil, fmt.Errorf("not sending the join token: %w", errs[i])
		}
	}
	return cas, errs, nil
}

func problemDetail(b []byte) string {
	var p struct{ Detail, Title string }
	if json.Unmarshal(b, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	return strings.TrimSpace(string(b))
}
