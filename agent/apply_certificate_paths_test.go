package agent

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"mesh/models"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"
)

// certSigningController makes a a host of m1 whose controller signs its
// service certificates with a CA of the test's own.
func certSigningController(t *testing.T, a *Agent) {
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
	t.Cleanup(ctl.Close)
	a.id = &Identity{Machine: "m1", Controllers: []string{ctl.URL}, Token: "t", ca: ca.Cert}
	a.client = newClient(a.id)
}

// TestApply_ACertificateThatGoesAwayIsNotInATreesWay: mesh's file that
// goes away from a directory a tree takes is cleared for it; a
// certificate's chain and key there (the certificate no longer named, or
// moved elsewhere) refused the tree as what mesh does not manage.
func TestApply_ACertificateThatGoesAwayIsNotInATreesWay(t *testing.T) {
	for _, moved := range []bool{false, true} {
		t.Run(map[bool]string{false: "Dropped", true: "Moved"}[moved], func(t *testing.T) {
			a := testAgent(t)
			certSigningController(t, a)
			cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
				Path: "/opt/app/chain.pem", KeyPath: "/opt/app/key.pem", Mode: "0600", Lifetime: "1h"}
			if _, err := applyAs(t, a, 1, cert); err != nil {
				t.Fatal(err)
			}
			d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
			decl := []models.Resource{{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}}
			if moved {
				cert.Path, cert.KeyPath = "/etc/web/chain.pem", "/etc/web/key.pem"
				decl = append(decl, cert)
			}
			acts, err := applyAs(t, a, 2, decl...)
			if err != nil {
				t.Fatalf("a tree taking /opt/app, which holds only mesh's certificate that goes away: %v (actions %+v)", err, acts)
			}
			if !exists(filepath.Join(a.root.dir, "opt/app/bin/run")) {
				t.Fatal("tree not in place")
			}
		})
	}
}

// TestApply_ACertificatesOldFileInTheWayOfAPathBeneathIt: a file moved
// beneath its old path is cleared out of its own way; a certificate's old
// chain where a directory is now needed was not: the certificate moved
// into a directory named as its old chain, or a file declared beneath a
// dropped certificate's chain, failed every attempt.
func TestApply_ACertificatesOldFileInTheWayOfAPathBeneathIt(t *testing.T) {
	for _, how := range []string{"CertMovedBeneath", "FileBeneathDroppedCert"} {
		t.Run(how, func(t *testing.T) {
			a := testAgent(t)
			certSigningController(t, a)
			cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
				Path: "/etc/web/tls", KeyPath: "/etc/web/key.pem", Mode: "0600", Lifetime: "1h"}
			if _, err := applyAs(t, a, 1, cert); err != nil {
				t.Fatal(err)
			}
			var decl []models.Resource
			if how == "CertMovedBeneath" {
				cert.Path, cert.KeyPath = "/etc/web/tls/chain.pem", "/etc/web/tls/key.pem"
				decl = append(decl, cert)
			} else {
				c := "c\n"
				decl = append(decl, models.Resource{ID: "web.conf", Module: "web", Build: 2, Kind: "file", Path: "/etc/web/tls/web.conf", Content: &c})
			}
			for attempt := 1; attempt <= 2; attempt++ {
				if acts, err := applyAs(t, a, 2, decl...); err != nil {
					t.Fatalf("attempt %d: %v (actions %+v)", attempt, err, acts)
				}
			}
		})
	}
}

// TestApply_ACertificateKeptInADirectoryATreeTakes: a certificate declared
// again at the same paths inside a real directory a tree takes: its files
// are cleared for the tree, and it is issued again, not left missing.
func TestApply_ACertificateKeptInADirectoryATreeTakes(t *testing.T) {
	a := testAgent(t)
	certSigningController(t, a)
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/opt/app/chain.pem", KeyPath: "/opt/app/key.pem", Mode: "0600", Lifetime: "1h"}
	if _, err := applyAs(t, a, 1, cert); err != nil {
		t.Fatal(err)
	}
	d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}, cert)
	if err != nil {
		t.Fatalf("%v (actions %+v)", err, acts)
	}
	if _, err := a.certificateOnDisk(cert); err != nil {
		t.Fatalf("the certificate, declared again and said %+v, is not on disk: %v", acts, err)
	}
	if !exists(filepath.Join(a.root.dir, "opt/app/bin/run")) {
		t.Fatal("tree not in place")
	}
}
