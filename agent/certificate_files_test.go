package agent

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mesh/models"
)

// certController signs service certificates for the declared lifetime
// (1h here) while refuse is false; refuses (403) while it is true. It
// returns the reports it received.
func certController(t *testing.T, a *Agent, refuse *atomic.Bool) *[]models.Report {
	t.Helper()
	ca := newCA(t)
	var reports []models.Report
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/host/service-certificates" {
			var rep models.Report
			_ = json.NewDecoder(r.Body).Decode(&rep)
			reports = append(reports, rep)
			w.WriteHeader(http.StatusCreated)
			return
		}
		if refuse.Load() {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"title":"Forbidden","detail":"no"}`))
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
	a.outbox = outbox{dir: filepath.Join(a.cfg.StateDir, "outbox"), stateDir: a.cfg.StateDir}
	a.logs = &logShipper{}
	return &reports
}

// TestCertificate_AChainThatCannotBeWrittenPutsTheKeyBack: a renewal whose chain cannot be
// written (disk full; the host dying between the two renames is the same
// state) leaves the new key beside the old chain: the valid certificate
// that was there is gone, and the pair on disk does not load.
//
// The full disk is RLIMIT_FSIZE, which holds for every file the process
// writes: the test runs in a process of its own (the test binary run again
// for it alone), where nothing else writes meanwhile. Run in the test
// binary, it made go test's own log of the run fail to be written, and the
// package with it.
func TestCertificate_AChainThatCannotBeWrittenPutsTheKeyBack(t *testing.T) {
	if os.Getenv("MESH_TEST_FSIZE_ALONE") == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count", "1")
		cmd.Env = append(os.Environ(), "MESH_TEST_FSIZE_ALONE=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("the test in a process of its own: %v\n%s", err, out)
		}
		return
	}
	a := testAgent(t)
	var refuse atomic.Bool
	certController(t, a, &refuse)
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Mode: "0600", Lifetime: "1h"}
	if _, err := applyAs(t, a, 1, cert); err != nil {
		t.Fatal(err)
	}
	a.state.Applied, a.state.AppliedSend = 1, "0193b1f2-0000-7000-8000-000000000001"
	if _, err := a.certificateOnDisk(cert); err != nil {
		t.Fatal(err)
	}
	makeDue(a, cert.ID)
	// Room for the key (~240 bytes), not for the chain (~1.2 KB).
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim := syscall.Rlimit{Cur: 600, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	_, err := a.issueCertificate(context.Background(), a.state.AppliedSend, cert)
	_ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)
	if err == nil {
		t.Fatal("the chain was written under a limit of 600 bytes a file")
	}
	t.Logf("renewal failed: %v", err)
	if _, err := a.certificateOnDisk(cert); err != nil {
		t.Fatalf("a renewal that failed writing the chain left the certificate on disk broken (the old one was valid): %v", err)
	}
}

// TestCertificate_LinksPlantedAtItsPathsAreNotFollowed: two certificates for
// the same name, A's key owned by daemon, B's owned by nobody in a
// directory nobody can write (its own data directory). nobody replaces
// its key and chain with links to A's; the next apply finds "B" on disk
// and valid, and chowns through the links: A's private key becomes
// nobody's.
func TestCertificate_LinksPlantedAtItsPathsAreNotFollowed(t *testing.T) {
	a := testAgent(t)
	var refuse atomic.Bool
	certController(t, a, &refuse)
	ca := models.Resource{ID: "a.cert", Module: "a", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/a/chain.pem", KeyPath: "/etc/a/key.pem", Mode: "0600", Owner: "daemon", Lifetime: "1h"}
	cb := models.Resource{ID: "b.cert", Module: "b", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/srv/b/chain.pem", KeyPath: "/srv/b/key.pem", Mode: "0600", Owner: "nobody", Lifetime: "1h"}
	if _, err := applyAs(t, a, 1, ca, cb); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(a.root.dir, "srv/b")
	_ = os.Chown(dir, 65534, 65534) // nobody's own directory
	for _, f := range []string{"key.pem", "chain.pem"} {
		_ = os.Remove(filepath.Join(dir, f))
		if err := os.Symlink("../../etc/a/"+f, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	acts, err := applyAs(t, a, 2, ca, cb)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(a.root.dir, "etc/a/key.pem"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1 {
		t.Fatalf("A's private key (declared owner daemon, uid 1) is now uid %d after links planted at B's paths (actions %+v)", st.Uid, acts)
	}
}

// A renewal the controller refused was reported and journaled as outcome
// "renewed" (its failure in the reason), one a minute, and the machine read
// healthy until the certificate expired. Nothing renewed is no "renewed":
// the certificate is a failing check, saying why and until when the one in
// place holds, until it is renewed.
func TestCertificate_AFailingRenewalIsAFailingCheckNotARenewal(t *testing.T) {
	a := testAgent(t)
	var refuse atomic.Bool
	certController(t, a, &refuse)
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Mode: "0600", Lifetime: "1h"}
	if _, err := applyAs(t, a, 1, cert); err != nil {
		t.Fatal(err)
	}
	a.state.Applied, a.state.AppliedSend = 1, "0193b1f2-0000-7000-8000-000000000001"
	before, _ := os.ReadFile(filepath.Join(a.root.dir, "etc/web/chain.pem"))
	makeDue(a, cert.ID) // two thirds on: due
	journaled := func() []Entry {
		j, err := ReadJournal(a.cfg.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	n := len(journaled())
	refuse.Store(true)
	a.renewDue(context.Background())
	after, _ := os.ReadFile(filepath.Join(a.root.dir, "etc/web/chain.pem"))
	if string(before) != string(after) {
		t.Fatal("a refused renewal changed the chain")
	}
	for _, e := range journaled()[n:] {
		if e.Outcome == models.OutcomeRenewed {
			t.Fatalf("nothing was renewed (the controller refused), yet the journal says %q: %+v", e.Outcome, e)
		}
	}
	failing := func() *models.CheckResult {
		for _, c := range a.checkAll(context.Background(), nil, 0) {
			if c.Resource == cert.ID && !c.OK {
				return &c
			}
		}
		return nil
	}
	if c := failing(); c == nil || !strings.Contains(c.Detail, "its renewal fails") || !strings.Contains(c.Detail, "valid until") {
		t.Fatalf("a failing renewal is no failing check of its certificate: %+v", c)
	}
	refuse.Store(false)
	a.renewDue(context.Background())
	if c := failing(); c != nil {
		t.Fatalf("renewed, and its check still fails: %+v", c)
	}
	if j := journaled(); j[len(j)-1].Outcome != models.OutcomeRenewed {
		t.Fatalf("the renewal is not journaled: %+v", j[len(j)-1])
	}
}

// makeDue moves a certificate this process obtained, of an hour's
// lifetime, past two thirds of it: its renewal is due.
func makeDue(a *Agent, id string) {
	o := a.obtained[id]
	o.at = o.at.Add(-41 * time.Minute)
	a.obtained[id] = o
}
