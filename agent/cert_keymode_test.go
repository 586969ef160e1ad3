package agent

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/models"
)

// TestCertificate_KeyModeRestoredOnApply: a certificate resource
// declares its key 0600. The key's mode drifted (a person's chmod, a
// restore from a backup, a config tool), and the next apply said the
// certificate "unchanged" and left the private key readable by every
// user, where a file resource whose mode drifted is written again. The
// mode is put back, and the apply says so.
func TestCertificate_KeyModeRestoredOnApply(t *testing.T) {
	ca := newCA(t)
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/host/service-certificates" {
			w.WriteHeader(http.StatusCreated)
			return
		}
		var req models.CertificateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		blk, _ := pem.Decode([]byte(req.CSR))
		csr, err := x509.ParseCertificateRequest(blk.Bytes)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		chain, _, err := ca.IssueService(csr, csr.DNSNames, time.Now(), time.Hour)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"chain": string(chain)})
	}))
	defer ctl.Close()

	a := testAgent(t)
	a.id = &Identity{Machine: "m1", Controllers: []string{ctl.URL}, Token: "t", ca: ca.Cert}
	a.client = newClient(a.id)
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Mode: "0600", Lifetime: "1h"}
	for gen := int64(1); gen <= 2; gen++ {
		st := a.state.clone()
		acts, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 2, Machine: "m1", Generation: gen, Resources: []models.Resource{cert}}, st)
		a.state = st
		if err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		key := filepath.Join(a.root.dir, "etc/web/key.pem")
		fi, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("generation %d applied (actions %+v), yet the private key %s is mode %04o, declared 0600", gen, acts, cert.KeyPath, fi.Mode().Perm())
		}
		if gen == 2 && (len(acts) != 1 || acts[0].Action != "updated" || !strings.Contains(acts[0].Detail, "/etc/web/key.pem mode 0600 (it was 0644)")) {
			t.Fatalf("generation 2 put the key's mode back but says %+v", acts)
		}
		// Drift before the next apply.
		if err := os.Chmod(key, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
