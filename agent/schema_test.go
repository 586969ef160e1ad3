package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mesh/models"
)

// signedPayload signs a declaration for m1 with the trusted key.
func signedPayload(t *testing.T, d models.DeclarationPayload) []byte {
	t.Helper()
	d.Machine = "m1"
	d.Generation = 7
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return envelopeOf(t, b, models.Signature{KeyID: "k1", Sig: ed25519.Sign(fuzzKey, b)})
}

// TestVerify_Schemas: this host decodes schemas 1 and 2, refuses others,
// and refuses schema-2 content in a declaration that says schema 1 (a
// schema-1 host would refuse its fields, whole).
func TestVerify_Schemas(t *testing.T) {
	if SchemaHeader != "1,2" {
		t.Fatalf("SchemaHeader = %q", SchemaHeader)
	}
	cert := models.Resource{ID: "w.cert", Kind: models.ResourceCertificate, Names: []string{"w.m1.mesh"}, Path: "/etc/w/chain.pem", KeyPath: "/etc/w/key.pem"}
	tlsSvc := models.Resource{ID: "w.svc", Kind: "service", Command: []string{"/opt/w/run"}, Check: &models.Check{TLS: "127.0.0.1:1", ServerName: "w.m2.mesh"}}
	for _, tc := range []struct {
		name   string
		d      models.DeclarationPayload
		refuse string
	}{
		{"OK_Schema1", models.DeclarationPayload{Schema: 1, Resources: []models.Resource{}}, ""},
		{"OK_Schema2Certificate", models.DeclarationPayload{Schema: 2, Resources: []models.Resource{cert, tlsSvc}}, ""},
		{"OK_Schema2WithSchema1Content", models.DeclarationPayload{Schema: 2, Resources: []models.Resource{}}, ""},
		{"ErrSchema3", models.DeclarationPayload{Schema: 3, Resources: []models.Resource{}}, "bad field: schema 3, this host decodes 1,2"},
		{"ErrCertificateInSchema1", models.DeclarationPayload{Schema: 1, Resources: []models.Resource{cert}}, "a schema-1 declaration with content of schema 2"},
		{"ErrTLSCheckInSchema1", models.DeclarationPayload{Schema: 1, Resources: []models.Resource{tlsSvc}}, "a schema-1 declaration with content of schema 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify(signedPayload(t, tc.d), fuzzTrust(), "m1")
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.refuse) {
				t.Fatalf("err = %v, want a refusal saying %q", err, tc.refuse)
			}
		})
	}
}

// TestCheckResources_Certificates: what the host refuses of a certificate
// resource, with the words it journals.
func TestCheckResources_Certificates(t *testing.T) {
	svc := models.Resource{ID: "w.svc", Kind: "service", Command: []string{"/opt/w/run"}}
	cert := func(f func(r *models.Resource)) *models.DeclarationPayload {
		r := models.Resource{ID: "w.cert", Kind: models.ResourceCertificate, Names: []string{"w.m1.mesh"},
			Path: "/etc/w/chain.pem", KeyPath: "/etc/w/key.pem", OnRenew: []models.OnRenew{{Service: "w.svc", Signal: "HUP"}}}
		f(&r)
		return &models.DeclarationPayload{Schema: 2, Resources: []models.Resource{svc, r}}
	}
	for _, tc := range []struct {
		name   string
		d      *models.DeclarationPayload
		refuse string
	}{
		{"OK", cert(func(*models.Resource) {}), ""},
		{"ErrKeyOutsideRoots", cert(func(r *models.Resource) { r.KeyPath = "/root/.ssh/key.pem" }), "escape: w.cert: path /root/.ssh/key.pem is outside the allowed roots"},
		{"ErrChainOutsideRoots", cert(func(r *models.Resource) { r.Path = "/srv/chain.pem" }), "escape: w.cert: path /srv/chain.pem is outside the allowed roots"},
		{"ErrKeyNotClean", cert(func(r *models.Resource) { r.KeyPath = "/etc/w/../../root/k" }), "is not clean"},
		{"ErrNoNames", cert(func(r *models.Resource) { r.Names = nil }), "names 0 DNS names"},
		{"ErrWildcard", cert(func(r *models.Resource) { r.Names = []string{"*.mesh"} }), `label "*" is not lowercase`},
		{"ErrOneFile", cert(func(r *models.Resource) { r.KeyPath = r.Path }), "one file"},
		{"ErrLifetime", cert(func(r *models.Resource) { r.Lifetime = "1s" }), "outside 10s"},
		{"ErrRenewsNoService", cert(func(r *models.Resource) { r.OnRenew = []models.OnRenew{{Service: "w.db"}} }), "renews w.db, which the declaration does not name as a service"},
		{"ErrSignal", cert(func(r *models.Resource) { r.OnRenew = []models.OnRenew{{Service: "w.svc", Signal: "KILL"}} }), `signals w.svc with "KILL"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkResources(tc.d, []string{"/etc", "/opt"})
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.refuse) {
				t.Fatalf("err = %v, want a refusal saying %q", err, tc.refuse)
			}
		})
	}
}

// TestServiceCert_ClockAheadDoesNotRenewInALoop: the host's clock runs
// 45 min ahead of the controller's (a VM resumed with a bad RTC, NTP down)
// and it manages a service certificate with a 1 h lifetime. Every
// certificate the controller signs is already due by the host's clock;
// judged by it, renewDue renewed it again at every turn of the poll loop
// (each poll held 1 s), restarting the on_renew services every second.
// A certificate this process obtained is judged by how long it has held it
// against its own dates: renewed once two thirds of its lifetime have
// passed since, and the poll is held no shorter for it.
func TestServiceCert_ClockAheadDoesNotRenewInALoop(t *testing.T) {
	ca := newCA(t)
	var mu sync.Mutex
	signed := 0
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/host/service-certificates" {
			w.WriteHeader(http.StatusCreated) // reports
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
		// The controller's clock: 45 minutes behind the host's.
		chain, _, err := ca.IssueService(csr, csr.DNSNames, time.Now().Add(-45*time.Minute), time.Hour)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		mu.Lock()
		signed++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"chain": string(chain)})
	}))
	defer ctl.Close()

	a := testAgent(t)
	a.id = &Identity{Machine: "m1", Controllers: []string{ctl.URL}, Token: "t", ca: ca.Cert}
	a.client = newClient(a.id)
	a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
	a.logs = &logShipper{}
	rs := &renewCounter{}
	a.services = rs
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Lifetime: "1h", OnRenew: []models.OnRenew{{Service: "web.service"}}}
	a.state.Applied, a.state.AppliedSend = 3, "0193b1f2-0000-7000-8000-000000000003"
	a.state.Resources[cert.ID] = &Managed{Kind: cert.Kind, Module: "web", Build: 1, Path: cert.Path, Digest: "sha256:c", Resource: &cert}
	a.state.Resources["web.service"] = &Managed{Kind: "service", Module: "web", Build: 1, Digest: "sha256:s"}
	if err := os.MkdirAll(filepath.Join(a.root.dir, "etc/web"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Three turns of the poll loop.
	for range 3 {
		a.renewDue(context.Background())
	}
	mu.Lock()
	n := signed
	mu.Unlock()
	if n != 1 {
		t.Fatalf("the certificate was signed %d times (web.service restarted %d times) in three turns of the poll loop, the next poll held %s: "+
			"each certificate the controller signs is already due by the host's clock", n, rs.n.Load(), a.holdForRenewal(50*time.Second))
	}
	if h := a.holdForRenewal(50 * time.Second); h != 50*time.Second {
		t.Fatalf("the poll is held %s for a certificate obtained just now", h)
	}
	// 41 minutes on, by the time it has been held, it is due.
	makeDue(a, cert.ID)
	a.renewDue(context.Background())
	mu.Lock()
	n = signed
	mu.Unlock()
	if n != 2 || rs.n.Load() != 2 {
		t.Fatalf("held two thirds of its lifetime, the certificate was signed %d times in all (web.service restarted %d times), want 2 (2)", n, rs.n.Load())
	}
}

// renewCounter counts the services restarted for a renewal.
type renewCounter struct {
	fakeServices
	n atomic.Int32
}

func (r *renewCounter) Renewed(ctx context.Context, id, signal string) error { r.n.Add(1); return nil }
