package agent

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/models"
)

// TestApply_AForgottenFileInATreeAFileTookIsSaidToGo: a file declared
// on_remove forget lay inside a tree; the next declaration drops it and
// puts a file at the tree's path (same id, or another). The tree's link
// and versions went, the forgotten file with them, yet the report says
// it was left in place.
func TestApply_AForgottenFileInATreeAFileTookIsSaidToGo(t *testing.T) {
	for _, id := range []string{"app.tree", "app.other"} {
		t.Run(id, func(t *testing.T) {
			a := testAgent(t)
			d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
			conf, c := "c\n", "now a file\n"
			if _, err := applyAs(t, a, 1,
				models.Resource{ID: "app.tree", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}},
				models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf, OnRemove: "forget"}); err != nil {
				t.Fatal(err)
			}
			acts, err := applyAs(t, a, 2, models.Resource{ID: id, Module: "app", Build: 2, Kind: "file", Path: "/opt/app", Content: &c})
			if err != nil {
				t.Fatal(err)
			}
			if exists(filepath.Join(a.root.dir, "opt/app/conf")) {
				t.Fatal("setup: /opt/app/conf still there")
			}
			for _, act := range acts {
				if act.Resource == "app.conf" && (act.Action != "removed" || strings.Contains(act.Detail, "left in place")) {
					t.Fatalf("app.conf went with the tree at /opt/app (a file is there now), but the report says %q: %q", act.Action, act.Detail)
				}
			}
		})
	}
}

// TestApply_AForgottenTreeReplacedAtItsPathIsNotLeftInPlace: a tree
// declared on_remove forget is dropped and another tree takes its path:
// the flip replaced its link and removed its unpacked version, reported
// left in place at /opt/app.
func TestApply_AForgottenTreeReplacedAtItsPathIsNotLeftInPlace(t *testing.T) {
	a := testAgent(t)
	d1 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	d2 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v2\n", mode: 0o755}))
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.old", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", OnRemove: "forget",
		Artifact: &models.Artifact{Digest: d1, URL: models.BlobURL(d1)}}); err != nil {
		t.Fatal(err)
	}
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.new", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d2, URL: models.BlobURL(d2)}})
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(a.root.dir, "opt/.app.mesh", d1[7:])) {
		t.Fatal("setup: the old version is still there")
	}
	for _, act := range acts {
		if act.Resource == "app.old" && strings.Contains(act.Detail, "left in place") {
			t.Fatalf("app.old's version was removed by app.new's flip at /opt/app, but the report says %q: %q", act.Action, act.Detail)
		}
	}
}

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

// TestApply_AForgottenTreeAFileTookLeavesNoVersions: a tree declared
// on_remove forget is dropped and a file takes its path: the file
// replaced the tree's link, and its unpacked versions stay on disk for
// good, reachable by no link and named by no state, while the report
// says the tree was left in place.
func TestApply_AForgottenTreeAFileTookLeavesNoVersions(t *testing.T) {
	a := testAgent(t)
	d1 := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	if _, err := applyAs(t, a, 1, models.Resource{ID: "app.old", Module: "app", Build: 1, Kind: "tree", Path: "/opt/app", OnRemove: "forget",
		Artifact: &models.Artifact{Digest: d1, URL: models.BlobURL(d1)}}); err != nil {
		t.Fatal(err)
	}
	c := "now a file\n"
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.file", Module: "app", Build: 2, Kind: "file", Path: "/opt/app", Content: &c})
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(a.root.dir, "opt/.app.mesh")) {
		t.Fatalf("/opt/.app.mesh is left, reachable from no link (a file is at /opt/app): actions %+v", acts)
	}
}

// TestApply_ATreeOverADirectoryOfMeshsFileThatStays: a directory holding
// only mesh's file is taken by a tree when the file goes away; when the
// same file stayed declared, beneath the new tree (written into it after
// the flip), the tree was refused for good as "not a tree mesh manages".
func TestApply_ATreeOverADirectoryOfMeshsFileThatStays(t *testing.T) {
	a := testAgent(t)
	conf := "c\n"
	f := models.Resource{ID: "app.conf", Module: "app", Build: 1, Kind: "file", Path: "/opt/app/conf", Content: &conf}
	if _, err := applyAs(t, a, 1, f); err != nil {
		t.Fatal(err)
	}
	d := cacheBlob(t, a, makeTar(t, tarEntry{name: "bin/run", body: "v1\n", mode: 0o755}))
	f.Build = 2
	acts, err := applyAs(t, a, 2, models.Resource{ID: "app.tree", Module: "app", Build: 2, Kind: "tree", Path: "/opt/app",
		Artifact: &models.Artifact{Digest: d, URL: models.BlobURL(d)}}, f)
	if err != nil {
		t.Fatalf("a tree at /opt/app, holding only mesh's file declared again inside it: %v (actions %+v)", err, acts)
	}
}
