package agent

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"mesh/models"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Generation 2 (send s2) applied web.cert for web.m1.mesh. Generation 3
// (send s3) added api.m1.mesh to it and failed a later step: the
// certificate was issued for the new names (its step succeeded, so the
// state keeps it), then the generation was rejected. At two thirds, the
// renewal asked for the new names naming s2, the applied send, whose
// declaration does not give them: the controller (which signs only what
// the named send's declaration gives) refused, every minute, until the
// certificate expired.
func TestCertificate_RenewalNamesTheSendThatGaveItsNames(t *testing.T) {
	a := testAgent(t)
	a.cfg.MaxAttempts = 1
	ca := newCA(t)
	var mu sync.Mutex
	decls := map[string]*models.DeclarationPayload{}
	var refusals []string
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/host/service-certificates" {
			w.WriteHeader(http.StatusCreated)
			return
		}
		var req models.CertificateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		blk, _ := pem.Decode([]byte(req.CSR))
		csr, _ := x509.ParseCertificateRequest(blk.Bytes)
		mu.Lock()
		d := decls[req.Send]
		mu.Unlock()
		// As service.IssueServiceCertificate: the named send's declaration
		// (applied generation 2 on the controller's record).
		if d == nil {
			http.Error(w, "no such send", 403)
			return
		}
		if _, err := models.CheckCertificateGrant(d, d.Generation, 2, req.Resource, csr.DNSNames); err != nil {
			mu.Lock()
			refusals = append(refusals, err.Error())
			mu.Unlock()
			http.Error(w, err.Error(), 403)
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
	a.id = &Identity{Machine: "m1", Controllers: []string{ctl.URL}, Token: "t", ca: ca.Cert, Keys: fuzzTrust()}
	a.client = newClient(a.id)
	a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
	a.logs = &logShipper{}
	a.services = &fakeServices{}
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Lifetime: "1h"}
	content := "x\n"
	conf := models.Resource{ID: "web.conf", Module: "web", Build: 1, Kind: "file", Path: "/etc/web/conf", Content: &content, After: []string{"web.cert"}}
	d2 := models.DeclarationPayload{Schema: 2, Machine: "m1", Generation: 2, Resources: []models.Resource{cert, conf}}
	decls["s2"] = &d2
	env2, _ := signDecl(t, d2)
	a.handle(context.Background(), &pollResult{body: env2, send: "s2", etag: `"2"`})
	if a.state.Applied != 2 {
		t.Fatalf("generation 2 not applied: %+v", a.state)
	}
	cert3 := cert
	cert3.Build = 2
	cert3.Names = []string{"web.m1.mesh", "api.m1.mesh"}
	conf3 := conf
	conf3.Build = 2
	conf3.Path = "/etc/other/x" // beneath a person's file: fails
	if err := os.WriteFile(filepath.Join(a.root.dir, "etc/other"), []byte("person's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d3 := models.DeclarationPayload{Schema: 2, Machine: "m1", Generation: 3, Resources: []models.Resource{cert3, conf3}}
	decls["s3"] = &d3
	env3, _ := signDecl(t, d3)
	a.handle(context.Background(), &pollResult{body: env3, send: "s3", etag: `"3"`})
	if a.state.Applied != 2 || a.state.Finished != 3 {
		t.Fatalf("want generation 3 rejected, 2 applied: applied %d finished %d", a.state.Applied, a.state.Finished)
	}
	// Two thirds on.
	makeDue(a, cert.ID)
	for range 3 {
		a.renewDue(context.Background())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusals) > 0 {
		t.Fatalf("the due certificate cannot be renewed: the controller refused %d times: %v", len(refusals), refusals[0])
	}
}
