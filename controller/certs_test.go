package controller_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/meshca"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// machineCert is a host's key and the certificate the controller gave it.
type machineCert struct {
	key  *ecdsa.PrivateKey
	pem  string
	leaf *x509.Certificate
}

func (m machineCert) tls(t *testing.T) tls.Certificate {
	t.Helper()
	der, _ := x509.MarshalPKCS8PrivateKey(m.key)
	c, err := tls.X509KeyPair([]byte(m.pem), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// as is a client of e presenting cert in its handshake (and no token).
func as(t *testing.T, e *ctltest.Env, cert *tls.Certificate) *ctltest.Env {
	conf := meshca.ClientConfig(e.Ctl.CA.Cert)
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	return ctltest.AttachWith(t, e.URL, e.Admin, &http.Transport{TLSClientConfig: conf, DisableKeepAlives: true})
}

func csrFor(t *testing.T, key *ecdsa.PrivateKey, tmpl *x509.CertificateRequest) string {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// enrolCSR enrols name with a join token and a CSR; it returns the status
// and body.
func enrolCSR(t *testing.T, e *ctltest.Env, token, name, csr string) (int, []byte) {
	t.Helper()
	resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{
		"join_token": token, "name": name, "os": "linux", "arch": "amd64", "host_version": "1.0.0", "schema": "1", "csr": csr}})
	return resp.StatusCode, b
}

// detail is a problem's detail (or the body, when it is none).
func detail(b []byte) string {
	var p struct{ Detail string }
	if json.Unmarshal(b, &p) == nil && p.Detail != "" {
		return p.Detail
	}
	return string(b)
}

// enrolWithCert enrols name with a fresh key and returns its certificate.
func enrolWithCert(t *testing.T, e *ctltest.Env, name string) (machineCert, string) {
	t.Helper()
	key, _ := meshca.NewKey()
	csr, _ := meshca.NewCSR(key, name)
	status, b := enrolCSR(t, e, e.JoinToken(), name, string(csr))
	var out struct{ Token, Certificate string }
	if status != 201 || json.Unmarshal(b, &out) != nil || out.Certificate == "" {
		t.Fatalf("enrol %s: %d %s", name, status, b)
	}
	leaf, err := meshca.ParseCertificatePEM([]byte(out.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	return machineCert{key: key, pem: out.Certificate, leaf: leaf}, out.Token
}

func poll(e *ctltest.Env, token, wait string) (*http.Response, []byte) {
	return e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=" + wait, Token: token})
}

func renew(t *testing.T, e *ctltest.Env, name string) (int, []byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := meshca.NewKey()
	csr, _ := meshca.NewCSR(key, name)
	resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/certificate", Body: map[string]string{"csr": string(csr)}})
	return resp.StatusCode, b, key
}

type auditRow struct{ Actor, Action, Target, Detail string }

func audits(t *testing.T, e *ctltest.Env, action string) []auditRow {
	t.Helper()
	var l struct{ Items []auditRow }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=500", Token: e.Admin}, 200, &l)
	var out []auditRow
	for _, a := range l.Items {
		if a.Action == action {
			out = append(out, a)
		}
	}
	return out
}

type machineState struct {
	State         string
	RevokedReason string     `json:"revoked_reason"`
	CertNotAfter  *time.Time `json:"certificate_not_after"`
}

func machineOf(t *testing.T, e *ctltest.Env, name string) machineState {
	t.Helper()
	var m machineState
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/" + name, Token: e.Admin}, 200, &m)
	return m
}

// TestMachineCerts_BadInputs: requests for more than a machine's own
// name, a certificate of another CA, and a deleted machine's certificate
// are each refused with a problem that names the machine, audited (an
// anonymous sender's once a minute per address), and
// nothing is issued or spent.
func TestMachineCerts_BadInputs(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	key, _ := meshca.NewKey()
	bc, _ := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{true})
	token := e.JoinToken()
	for _, tc := range []struct {
		name, csr, want string
	}{
		{"AnotherMachinesName", csrFor(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "m2"}}), `names machine "m2"`},
		{"CAFlag", csrFor(t, key, &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 19}, Critical: true, Value: bc}}}), "asks for extension 2.5.29.19"},
		{"ExtraSAN", csrFor(t, key, &x509.CertificateRequest{DNSNames: []string{"controller.example"}}), "asks for other names"},
	} {
		t.Run("Enrol_"+tc.name, func(t *testing.T) {
			status, b := enrolCSR(t, e, token, "m1", tc.csr)
			if status != 400 || !strings.Contains(detail(b), tc.want) {
				t.Fatalf("%d %s; want 400 saying %q", status, b, tc.want)
			}
		})
	}
	// Refused at enrolment, by an anonymous sender: audited once a minute
	// per address (the next record counts the rest).
	if n := len(audits(t, e, "certificate-refused")); n != 1 {
		t.Fatalf("%d refusals from one address audited, want 1", n)
	}
	// Nothing was spent: the same join token enrols m1 with a good request.
	csr, _ := meshca.NewCSR(key, "m1")
	if status, b := enrolCSR(t, e, token, "m1", string(csr)); status != 201 {
		t.Fatalf("enrolling with the same token after the refusals: %d %s", status, b)
	}

	m1, _ := enrolWithCert(t, e, "m1b")
	c1 := m1.tls(t)
	host := as(t, e, &c1)
	if resp, b := poll(host, "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("poll with the certificate: %d %s", resp.StatusCode, b)
	}
	if m := machineOf(t, e, "m1b"); m.CertNotAfter == nil || !m.CertNotAfter.Equal(m1.leaf.NotAfter) {
		t.Fatalf("machine view %+v, certificate until %s", m, m1.leaf.NotAfter)
	}

	t.Run("Renew_AnotherMachinesName", func(t *testing.T) {
		resp, b := host.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/certificate",
			Body: map[string]string{"csr": csrFor(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "m2"}})}})
		if resp.StatusCode != 400 || !strings.Contains(detail(b), `names machine "m2"`) {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if m := machineOf(t, e, "m1b"); !m.CertNotAfter.Equal(m1.leaf.NotAfter) {
			t.Fatal("a certificate was recorded for a refused request")
		}
	})

	t.Run("AnotherCA", func(t *testing.T) {
		certDER, keyDER, _ := meshca.New(time.Now())
		other, _ := meshca.Parse(certDER, keyDER)
		k, _ := meshca.NewKey()
		req, _ := meshca.NewCSR(k, "m1b")
		csr, _ := meshca.CheckCSR(req, "m1b")
		forged, _ := other.IssueMachine(csr, "m1b", m1.leaf.Subject.SerialNumber, time.Now(), time.Hour)
		fc := machineCert{key: k, pem: string(meshca.EncodePEM(forged))}.tls(t)
		resp, b := poll(as(t, e, &fc), "", "0s")
		if resp.StatusCode != 401 || !strings.Contains(string(b), "machine m1b's client certificate") || !strings.Contains(string(b), "not issued by this mesh's CA") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if rs := audits(t, e, "certificate-refused"); len(rs) != 3 || rs[0].Target != "machine/m1b" || !strings.Contains(rs[0].Detail, "not issued by this mesh's CA") {
			t.Fatalf("audit %+v", rs)
		}
		if m := machineOf(t, e, "m1b"); m.State == "revoked" {
			t.Fatal("a forged certificate changed the machine's state")
		}
		// A new name on each forged certificate, 30,000 characters long:
		// each was an audit row of its own with the name in it, and the
		// name came back in the refusal. The address's refusals are one
		// row a minute, and a name no machine can have is not repeated.
		for i := range 3 {
			name := fmt.Sprintf("x%d-%s", i, strings.Repeat("a", 30_000))
			forged, err := other.IssueMachine(csr, name, "e", time.Now(), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			fc := machineCert{key: k, pem: string(meshca.EncodePEM(forged))}.tls(t)
			resp, b := poll(as(t, e, &fc), "", "0s")
			if resp.StatusCode != 401 || len(b) > 2_000 || !strings.Contains(string(b), "not issued by this mesh's CA") {
				t.Fatalf("a forged certificate with a long name: %d, %d bytes: %.300s", resp.StatusCode, len(b), b)
			}
		}
		if rs := audits(t, e, "certificate-refused"); len(rs) != 3 {
			t.Fatalf("three more forged certificates from one address made %d more audit rows, want none", len(rs)-3)
		}
	})

	t.Run("DeletedMachine", func(t *testing.T) {
		m3, _ := enrolWithCert(t, e, "m3")
		c3 := m3.tls(t)
		e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m3", Token: e.Admin}, 204, nil)
		h3 := as(t, e, &c3)
		resp, b := poll(h3, "", "0s")
		if resp.StatusCode != 401 || !strings.Contains(string(b), "machine m3 was revoked (or deleted)") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if status, b, _ := renew(t, h3, "m3"); status != 401 {
			t.Fatalf("a deleted machine renewed its certificate: %d %s", status, b)
		}
		if rs := audits(t, e, "host-refused"); len(rs) == 0 || rs[0].Target != "machine/m3" {
			t.Fatalf("audit %+v", rs)
		}
		if rs := audits(t, e, "issue-certificate"); len(rs) != 3 { // m1, m1b, m3 at enrolment
			t.Fatalf("issued %d, want 3: %+v", len(rs), rs)
		}
	})
}

// TestMachineCerts_RevokeClosesParkedPoll: revoking a machine answers its
// waiting poll 401 at once, says revoked with the reason in its state, and
// refuses its certificate and its token from then on.
func TestMachineCerts_RevokeClosesParkedPoll(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	m, token := enrolWithCert(t, e, "m1")
	c := m.tls(t)
	host := as(t, e, &c)
	resp, b := poll(host, "", "0s")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	done := make(chan int, 1)
	go func() {
		resp, _ := host.HTTP.Do(mustReq(t, e.URL+"/api/v1/host/declaration?wait=120s", resp.Header.Get("ETag")))
		if resp != nil {
			resp.Body.Close()
			done <- resp.StatusCode
		}
		close(done)
	}()
	testwait.For(t, 10*time.Second, "m1's poll parked", func() bool { return e.Ctl.Hub.OpenPolls() > 0 })
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/revoke", Token: e.Admin, Body: map[string]string{"reason": "laptop stolen"}}, 200, nil)
	select {
	case st := <-done:
		if st != 401 {
			t.Fatalf("the parked poll was answered %d, want 401", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked poll was not closed by the revocation")
	}
	if ms := machineOf(t, e, "m1"); ms.State != "revoked" || ms.RevokedReason != "laptop stolen" {
		t.Fatalf("machine %+v", ms)
	}
	if resp, b := poll(host, "", "0s"); resp.StatusCode != 401 || !strings.Contains(string(b), "machine m1 was revoked") {
		t.Fatalf("certificate after revocation: %d %s", resp.StatusCode, b)
	}
	if resp, _ := poll(e, token, "0s"); resp.StatusCode != 401 {
		t.Fatalf("token after revocation: %d", resp.StatusCode)
	}
}

func mustReq(t *testing.T, url, etag string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("If-None-Match", etag)
	return req
}

// TestMachineCerts_Renewal: a certificate renews for a new key; an expired
// one renews once within the grace (a poll with it is refused saying how);
// one past the grace is refused and its machine says revoked.
func TestMachineCerts_Renewal(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true, MachineCertLifetime: 2 * time.Second, MachineCertGrace: time.Hour})
	m, _ := enrolWithCert(t, e, "m1")
	c := m.tls(t)
	host := as(t, e, &c)
	status, b, _ := renew(t, host, "m1")
	if status != 201 {
		t.Fatalf("renewal: %d %s", status, b)
	}
	testwait.For(t, 10*time.Second, "the first certificate expired", func() bool { return time.Now().After(m.leaf.NotAfter.Add(time.Second)) })
	if resp, b := poll(host, "", "0s"); resp.StatusCode != 401 || !strings.Contains(string(b), "the host renews it (POST /api/v1/host/certificate)") {
		t.Fatalf("poll with an expired certificate: %d %s", resp.StatusCode, b)
	}
	if status, b, _ := renew(t, host, "m1"); status != 201 {
		t.Fatalf("renewal in the grace: %d %s", status, b)
	}
	// Its answer lost, the expired certificate renews again: spent at the
	// first renewal, it left the host nothing to renew with but enrolment.
	status, b, key := renew(t, host, "m1")
	if status != 201 {
		t.Fatalf("a second renewal in the grace, the first never presented: %d %s", status, b)
	}
	var renewed struct{ Certificate string }
	if err := json.Unmarshal(b, &renewed); err != nil {
		t.Fatal(err)
	}
	nc := machineCert{key: key, pem: renewed.Certificate}.tls(t)
	if resp, b := poll(as(t, e, &nc), "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("poll with the renewed certificate: %d %s", resp.StatusCode, b)
	}
	// Presented, the new one retires the expired one: it renews no more.
	if status, b, _ := renew(t, as(t, e, &c), "m1"); status != 401 || !strings.Contains(string(b), "was replaced by a newer one") {
		t.Fatalf("a renewal in the grace once its successor was presented: %d %s", status, b)
	}

	t.Run("TokenAsksNoMoreOnceOneWasPresented", func(t *testing.T) {
		// A machine that moved to TLS with its token: once a certificate
		// of it was presented, the token asks for none, expired or not (a
		// copy of host.json got one once the host's expired, and its
		// presenting it retired the host's).
		e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true, MachineCertLifetime: 2 * time.Second, MachineCertGrace: time.Hour})
		m2 := e.Enroll("m2")
		plain := as(t, e, nil)
		ask := func() (*http.Response, []byte, *ecdsa.PrivateKey) {
			key, _ := meshca.NewKey()
			csr, _ := meshca.NewCSR(key, "m2")
			resp, b := plain.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/certificate", Token: m2.Token, Body: map[string]string{"csr": string(csr)}})
			return resp, b, key
		}
		resp, b, key := ask()
		if resp.StatusCode != 201 {
			t.Fatalf("the first certificate: %d %s", resp.StatusCode, b)
		}
		var first struct{ Certificate string }
		if err := json.Unmarshal(b, &first); err != nil {
			t.Fatal(err)
		}
		mc := machineCert{key: key, pem: first.Certificate}
		c2 := mc.tls(t)
		if resp, b := poll(as(t, e, &c2), "", "0s"); resp.StatusCode != 200 {
			t.Fatalf("poll with it: %d %s", resp.StatusCode, b)
		}
		leaf, _ := x509.ParseCertificate(c2.Certificate[0])
		testwait.For(t, 10*time.Second, "the certificate expired", func() bool { return time.Now().After(leaf.NotAfter.Add(time.Second)) })
		if resp, b, _ := ask(); resp.StatusCode != 401 || !strings.Contains(detail(b), "holds a certificate its host has presented") {
			t.Fatalf("the token, once the presented certificate expired: %d %s", resp.StatusCode, b)
		}
		if status, b, _ := renew(t, as(t, e, &c2), "m2"); status != 201 {
			t.Fatalf("the host's renewal in its grace: %d %s", status, b)
		}
	})

	t.Run("PastGrace", func(t *testing.T) {
		e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true, MachineCertLifetime: time.Second, MachineCertGrace: time.Second})
		m, _ := enrolWithCert(t, e, "m2")
		c := m.tls(t)
		host := as(t, e, &c)
		testwait.For(t, 10*time.Second, "the certificate past its grace", func() bool { return time.Now().After(m.leaf.NotAfter.Add(2 * time.Second)) })
		if status, b, _ := renew(t, host, "m2"); status != 401 || !strings.Contains(string(b), "past the renewal grace") {
			t.Fatalf("renewal past the grace: %d %s", status, b)
		}
		if ms := machineOf(t, e, "m2"); ms.State != "revoked" || !strings.Contains(ms.RevokedReason, "past the renewal grace") {
			t.Fatalf("machine %+v", ms)
		}
	})
}

// TestMachineCerts_RevokeOnEveryReplica: two controllers on one
// PostgreSQL store; a machine revoked through one has its waiting poll on
// the other closed, and its certificate refused there, at once (the one
// revocation mechanism, told by notification).
func TestMachineCerts_RevokeOnEveryReplica(t *testing.T) {
	a, _, onB, done := parkedOnAnotherReplica(t, ctltest.Options{TLS: true})
	a.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/revoke", Token: a.Admin}, 200, nil)
	select {
	case st := <-done:
		if st != 401 {
			t.Fatalf("b answered the parked poll %d, want 401", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b did not close the revoked machine's parked poll")
	}
	if resp, body := poll(onB, "", "0s"); resp.StatusCode != 401 || !strings.Contains(detail(body), "machine m1 was revoked") {
		t.Fatalf("b after the revocation: %d %s", resp.StatusCode, body)
	}
}

// parkedOnAnotherReplica starts two controllers on one PostgreSQL store (b
// with bOpts), enrols m1 with a certificate through a, and parks m1's poll
// on b: onB is m1's host on b, done is given the parked poll's status.
func parkedOnAnotherReplica(t *testing.T, bOpts ctltest.Options) (a, b, onB *ctltest.Env, done <-chan int) {
	t.Helper()
	sc := storetest.Config(t, store.Postgres)
	a = ctltest.StartWith(t, sc, ctltest.Options{TLS: true})
	b = ctltest.StartWith(t, sc, bOpts)
	b.Admin = a.Admin
	m, _ := enrolWithCert(t, a, "m1")
	c := m.tls(t)
	onB = as(t, b, &c)
	resp, body := poll(onB, "", "0s")
	if resp.StatusCode != 200 {
		t.Fatalf("poll on the other replica: %d %s", resp.StatusCode, body)
	}
	status := make(chan int, 1)
	go func() {
		defer close(status)
		if resp, err := onB.HTTP.Do(mustReq(t, b.URL+"/api/v1/host/declaration?wait=120s", resp.Header.Get("ETag"))); err == nil {
			resp.Body.Close()
			status <- resp.StatusCode
		}
	}()
	testwait.For(t, 10*time.Second, "m1's poll parked on b", func() bool { return b.Ctl.Hub.OpenPolls() > 0 })
	return a, b, onB, status
}

// TestMachineCerts_CopiedHostTokenIsNotTheMachine: a machine enrolled with
// a certificate is its certificate. Its host token alone, over TLS (a copy
// of host.json without machine.pem), neither polls as it nor gets a
// certificate for a key of the copier's; each refusal says why and is on
// the record. The host with its certificate goes on polling. A machine
// enrolled with its token alone asks for its first certificate with it
// (a host moving to TLS) and keeps polling with it (a rollback to a
// release without certificates must reach the controller), but while that
// certificate is valid the token gets no other.
func TestMachineCerts_CopiedHostTokenIsNotTheMachine(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	m1, token := enrolWithCert(t, e, "m1")
	copier := as(t, e, nil)
	askWithToken := func(name, token string) (*http.Response, []byte) {
		key, _ := meshca.NewKey()
		csr, _ := meshca.NewCSR(key, name)
		return copier.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/certificate", Token: token, Body: map[string]string{"csr": string(csr)}})
	}
	const why = "was enrolled with a machine certificate: its host token alone is refused"
	if resp, b := poll(copier, token, "0s"); resp.StatusCode != 401 || !strings.Contains(detail(b), why) {
		t.Fatalf("a poll with the host token alone: %d %s", resp.StatusCode, b)
	}
	if resp, b := askWithToken("m1", token); resp.StatusCode != 401 || !strings.Contains(detail(b), why) {
		t.Fatalf("a certificate asked with the host token alone: %d %s", resp.StatusCode, b)
	}
	if m := machineOf(t, e, "m1"); !m.CertNotAfter.Equal(m1.leaf.NotAfter) {
		t.Fatal("a certificate was issued to the copier")
	}
	refused := audits(t, e, "host-refused")
	if len(refused) != 1 || !strings.Contains(refused[0].Detail, why) {
		t.Fatalf("the refusals' record: %+v", refused)
	}
	c1 := m1.tls(t)
	if resp, b := poll(as(t, e, &c1), "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("the host's poll with its certificate: %d %s", resp.StatusCode, b)
	}

	m2 := e.Enroll("m2")
	if resp, b := askWithToken("m2", m2.Token); resp.StatusCode != 201 {
		t.Fatalf("m2's first certificate, asked with its token: %d %s", resp.StatusCode, b)
	}
	// Its answer lost (never presented), the host asks again and is given
	// one: it had to enrol again, a person and a join token, for a blip.
	// Once a minute at most: the token does not mint certificates.
	if resp, b := askWithToken("m2", m2.Token); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(detail(b), "not presented yet; the host token asks again after") {
		t.Fatalf("asked again at once: %d %s", resp.StatusCode, b)
	}
	mm, err := e.Ctl.Store.Machine(context.Background(), "m2")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Ctl.Store.DB().Model(&models.Machine{}).Where("name = ?", "m2").Update("cert_not_after", mm.CertNotAfter.Add(-2*time.Minute)).Error; err != nil {
		t.Fatal(err) // as if issued two minutes earlier
	}
	key, _ := meshca.NewKey()
	csr, _ := meshca.NewCSR(key, "m2")
	resp, b := copier.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/certificate", Token: m2.Token, Body: map[string]string{"csr": string(csr)}})
	if resp.StatusCode != 201 {
		t.Fatalf("m2's first certificate asked again, the first never presented: %d %s", resp.StatusCode, b)
	}
	if rs := audits(t, e, "issue-certificate"); len(rs) == 0 || !strings.Contains(rs[0].Detail, "was never presented") {
		t.Fatalf("the second issue's record: %+v", rs)
	}
	var got struct{ Certificate string }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	c2 := machineCert{key: key, pem: got.Certificate}.tls(t)
	if resp, b := poll(as(t, e, &c2), "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("m2's poll with its certificate: %d %s", resp.StatusCode, b)
	}
	// Presented, it is the machine: the token gets no other.
	if resp, b := askWithToken("m2", m2.Token); resp.StatusCode != 401 || !strings.Contains(detail(b), "holds a certificate its host has presented") {
		t.Fatalf("a certificate asked with m2's token once its own was presented: %d %s", resp.StatusCode, b)
	}
	if resp, b := poll(copier, m2.Token, "0s"); resp.StatusCode != 200 {
		t.Fatalf("m2's poll with its token, before any --host-bearer-until: %d %s", resp.StatusCode, b)
	}
}

// TestMachineCerts_ANewCertificateRetiresTheOld: a renewal's certificate,
// once its host presents it, retires the one it replaces — refused from
// then on, saying so, on the record. Until then the old one polls and
// renews: a renewal's answer lost must not leave the host only a refused
// certificate.
func TestMachineCerts_ANewCertificateRetiresTheOld(t *testing.T) {
	e := ctltest.StartWith(t, storetest.Config(t, store.SQLite), ctltest.Options{TLS: true})
	m, _ := enrolWithCert(t, e, "m1")
	c := m.tls(t)
	old := as(t, e, &c)
	if resp, b := poll(old, "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("poll: %d %s", resp.StatusCode, b)
	}
	status, b, key := renew(t, old, "m1")
	if status != 201 {
		t.Fatalf("renewal: %d %s", status, b)
	}
	// The answer lost: the old certificate still polls.
	if resp, b := poll(old, "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("the old certificate before the new one was presented: %d %s", resp.StatusCode, b)
	}
	var renewed struct{ Certificate string }
	if err := json.Unmarshal(b, &renewed); err != nil {
		t.Fatal(err)
	}
	nc := machineCert{key: key, pem: renewed.Certificate}.tls(t)
	if resp, b := poll(as(t, e, &nc), "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("the new certificate: %d %s", resp.StatusCode, b)
	}
	// Refused, and its connection closed: a kept connection goes on
	// presenting the certificate it was made with, so the host's next
	// request, on a new one, presents its newest.
	if resp, b := poll(as(t, e, &c), "", "0s"); resp.StatusCode != 401 || !resp.Close ||
		!strings.Contains(detail(b), "was replaced by a newer one, which its host has presented since") {
		t.Fatalf("the old certificate after the new one was presented: %d close %v %s", resp.StatusCode, resp.Close, b)
	}
	if rs := audits(t, e, "certificate-in-use"); len(rs) == 0 || !strings.Contains(rs[0].Detail, "retired") {
		t.Fatalf("the record: %+v", rs)
	}
	if rs := audits(t, e, "host-refused"); len(rs) == 0 || !strings.Contains(rs[0].Detail, "was replaced by") {
		t.Fatalf("the refusal's record: %+v", rs)
	}
}

// TestMachineCerts_AReplicaBehindDoesNotCallItsOwnCAsCertificateForged:
// two replicas on one PostgreSQL store, the one that issued a machine's
// certificate ten minutes ahead of the other (certificates are back-dated
// five). The other refused it — rightly, it is not valid yet on its clock
// — as "not issued by this mesh's CA", to the host and in the audit log,
// and counted it among certificates of another CA by the host's address.
func TestMachineCerts_AReplicaBehindDoesNotCallItsOwnCAsCertificateForged(t *testing.T) {
	sc := storetest.Config(t, store.Postgres)
	a := ctltest.StartWith(t, sc, ctltest.Options{TLS: true})
	b := ctltest.StartWith(t, sc, ctltest.Options{TLS: true})
	b.Admin = a.Admin
	a.Ctl.Store.Now = func() time.Time { return time.Now().Add(10 * time.Minute).UTC() }
	m, _ := enrolWithCert(t, a, "m1")
	c := m.tls(t)
	resp, body := poll(as(t, b, &c), "", "0s")
	if resp.StatusCode != 401 || strings.Contains(detail(body), "not issued by this mesh's CA") || !strings.Contains(detail(body), "clock") {
		t.Fatalf("the mesh CA's own certificate, not yet valid on b's clock: %d %s, want 401 saying the clocks differ", resp.StatusCode, detail(body))
	}
	rows := audits(t, b, "certificate-refused")
	if len(rows) == 0 {
		t.Fatal("the refusal is not on the record")
	}
	for _, r := range rows {
		if r.Target != "machine/m1" || strings.Contains(r.Detail, "not issued by this mesh's CA") {
			t.Errorf("audit: %s: %s", r.Target, r.Detail)
		}
	}
}

// TestRestore_AHostThatRenewedItsCertificateSinceTheBackupIsNotLockedOut:
// a backup taken, then the host renewed its client certificate and
// presented the new one; the store restored from the backup. The restored
// machine row named the certificate of before as in use and latest, so
// the new one was retired as "neither in use nor the latest" and refused,
// the old one refused by the retirement the restore carried, and the
// host's token alone refused: locked out for good, where the README
// promises a conflict an admin resolves.
func TestRestore_AHostThatRenewedItsCertificateSinceTheBackupIsNotLockedOut(t *testing.T) {
	ctx := context.Background()
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc, ctltest.Options{TLS: true})
	// The first certificate issued an hour before the renewal (a day's
	// renewals are days apart; a certificate's dates are to the second).
	e.Ctl.Store.Now = func() time.Time { return time.Now().Add(-time.Hour).UTC() }
	m, _ := enrolWithCert(t, e, "m1")
	c := m.tls(t)
	if resp, b := poll(as(t, e, &c), "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("poll: %d %s", resp.StatusCode, b)
	}
	e.Ctl.Store.Now = func() time.Time { return time.Now().UTC() }
	backup := filepath.Join(t.TempDir(), "b.db")
	if err := e.Ctl.Store.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	status, b, key := renew(t, as(t, e, &c), "m1")
	if status != 201 {
		t.Fatalf("renewal: %d %s", status, b)
	}
	var renewed struct{ Certificate string }
	if err := json.Unmarshal(b, &renewed); err != nil {
		t.Fatal(err)
	}
	nc := machineCert{key: key, pem: renewed.Certificate}.tls(t)
	if resp, b := poll(as(t, e, &nc), "", "0s"); resp.StatusCode != 200 {
		t.Fatalf("the new certificate before the restore: %d %s", resp.StatusCode, b)
	}
	admin := e.Admin
	e.Stop()
	if _, err := store.Restore(ctx, sc.DataDir, backup, time.Now()); err != nil {
		t.Fatal(err)
	}
	e2 := ctltest.StartWith(t, sc, ctltest.Options{TLS: true})
	e2.Admin = admin
	if resp, b := poll(as(t, e2, &nc), "", "0s"); resp.StatusCode == 401 {
		t.Fatalf("after the restore the host's newest certificate (never revoked) is refused: %d %s", resp.StatusCode, detail(b))
	}
	if resp, b := poll(as(t, e2, &nc), "", "0s"); resp.StatusCode == 401 {
		t.Fatalf("presented again: %d %s", resp.StatusCode, detail(b))
	}
}
