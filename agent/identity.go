package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

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
}

// PublicKey is a controller declaration key the host trusts.
type PublicKey struct {
	KeyID     string `json:"key_id"`
	PublicKey []byte `json:"public_key"`
}

// SchemaHeader is the declaration schemas this host decodes (X-Mesh-Schema).
const SchemaHeader = "1"

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
	return &id, nil
}

// Enroll spends a join token with the first controller that answers and
// keeps what it gave in the state dir.
func Enroll(ctx context.Context, controllers []string, joinToken, name, stateDir string) (*Identity, error) {
	if len(controllers) == 0 {
		return nil, errors.New("no controller URL given")
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	if _, err := os.Stat(identityPath(stateDir)); err == nil {
		return nil, fmt.Errorf("%s is already enrolled (host.json exists)", stateDir)
	}
	body, _ := json.Marshal(map[string]string{"join_token": joinToken, "name": name, "os": runtime.GOOS,
		"arch": runtime.GOARCH, "host_version": version.Version, "schema": SchemaHeader})
	var lastErr error
	for _, u := range controllers {
		u = strings.TrimRight(u, "/")
		req, err := http.NewRequestWithContext(ctx, "POST", u+"/api/v1/enroll", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
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
			Machine string      `json:"machine"`
			Token   string      `json:"token"`
			Keys    []PublicKey `json:"keys"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("enroll at %s: %w", u, err)
		}
		for _, k := range out.Keys {
			if len(k.PublicKey) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("enroll at %s: key %s is not an ed25519 public key", u, k.KeyID)
			}
		}
		id := &Identity{Machine: out.Machine, Token: out.Token, Keys: out.Keys}
		for _, c := range controllers {
			id.Controllers = append(id.Controllers, strings.TrimRight(c, "/"))
		}
		if err := writeJSONAtomic(identityPath(stateDir), id, 0o600); err != nil {
			return nil, err
		}
		return id, nil
	}
	return nil, fmt.Errorf("no controller answered: %w", lastErr)
}

func problemDetail(b []byte) string {
	var p struct{ Detail, Title string }
	if json.Unmarshal(b, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	return strings.TrimSpace(string(b))
}
