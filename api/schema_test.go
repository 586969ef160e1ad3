package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
	"mesh/testwait"
)

const certModule = `{"resources": [
  {"name": "web", "kind": "service", "command": ["/opt/web/run"], "after": ["cert"],
   "check": {"tls": "127.0.0.1:8443", "server_name": "web.${machine.name}.mesh"}},
  {"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh", "web.mesh"],
   "path": "/etc/web/chain.pem", "key_path": "/etc/web/key.pem", "lifetime": "1h", "on_renew": [{"service": "web", "signal": "HUP"}]}
]}`

func pollSchema(e *ctltest.Env, token string, known int64, schema string) poll {
	e.T.Helper()
	h := map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": schema}
	if known > 0 {
		h["If-None-Match"] = fmt.Sprintf(`"%d"`, known)
	}
	resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: token, Header: h})
	return poll{status: resp.StatusCode, etag: resp.Header.Get("ETag"), send: resp.Header.Get("X-Mesh-Send"), body: b}
}

func csrFor(t *testing.T, names ...string) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: names[0]}, DNSNames: names}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

type machineHeld struct {
	State    string `json:"state"`
	HeldBack string `json:"held_back"`
	Schema   string `json:"schema"`
}

// TestSchema_HeldBackThenUpgradedAndCertified: a machine whose host
// advertises schema 1 is sent held-back content (schema 1, what it applied)
// and shown behind with the reason; its host advertising 1,2 bumps the
// generation (trigger schema), composed in full in schema 2; the host then
// gets a certificate for exactly the names its declaration gives it, and a
// CSR for another machine's name is refused (403, audited).
func TestSchema_HeldBackThenUpgradedAndCertified(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := pollSchema(e, en.Token, 0, "1")
		if p.status != 200 {
			t.Fatalf("first poll: %d %s", p.status, p.body)
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied"})
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "web", certModule, []byte("tree"), ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
			t.Fatalf("release: %d %s", resp.StatusCode, b)
		}
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "web"}}}}, 200, nil)

		// Held back: generation 2 carries what was applied (nothing), schema 1.
		p = pollSchema(e, en.Token, 1, "1")
		d := verify(t, en, p.body)
		if p.status != 200 || d.Generation != 2 || d.Schema != 1 || len(d.Resources) != 0 {
			t.Fatalf("held-back poll: %d %+v", p.status, d)
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 2, "outcome": "applied"})
		var m machineHeld
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		if m.State != models.StateBehind || m.HeldBack != "held back: needs host schema 2; host 1.0.0 decodes 1; release 1.5.0 decodes 1,2" {
			t.Fatalf("machine = %+v, want behind with the held-back reason", m)
		}

		// The host now decodes 1 and 2: a new generation, trigger schema,
		// composed in full.
		p = pollSchema(e, en.Token, 2, "2,1")
		d = verify(t, en, p.body)
		if p.status != 200 || d.Generation != 3 || d.Schema != 2 || len(d.Resources) != 2 {
			t.Fatalf("after the upgrade: %d %+v", p.status, d)
		}
		var sends struct{ Items []models.SendView }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/sends", Token: e.Admin}, 200, &sends)
		if s := sends.Items[0]; s.Trigger != models.TriggerSchema || s.Schema != 2 || sends.Items[1].Schema != 1 {
			t.Fatalf("sends = %+v", sends.Items)
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 3, "outcome": "applied"})
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		if m.State != models.StateCurrent || m.HeldBack != "" || m.Schema != "1,2" {
			t.Fatalf("machine = %+v, want current, nothing held back, schemas 1,2", m)
		}

		// A certificate for exactly the names given.
		var got struct {
			Chain    string    `json:"chain"`
			NotAfter time.Time `json:"not_after"`
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/service-certificates", Token: en.Token,
			Body: map[string]any{"send": p.send, "resource": "web.cert", "csr": csrFor(t, "web.m1.mesh", "web.mesh")}}, 201, &got)
		blk, _ := pem.Decode([]byte(got.Chain))
		leaf, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(e.Ctl.CA.Cert)
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "web.m1.mesh", Roots: pool}); err != nil {
			t.Fatalf("issued certificate does not verify against the mesh CA: %v", err)
		}
		if life := time.Until(leaf.NotAfter); life > time.Hour || life < 55*time.Minute {
			t.Fatalf("lifetime %v, want the declared 1h", life)
		}

		// Refused: another machine's name, a resource that is no
		// certificate, a CSR that is not one.
		for _, tc := range []struct {
			name     string
			body     map[string]any
			status   int
			detail   string
			audited  bool
			problemT string
		}{
			{"AnotherMachinesName", map[string]any{"send": p.send, "resource": "web.cert", "csr": csrFor(t, "web.m1.mesh", "web.m2.mesh")},
				403, `not given the name "web.m2.mesh"`, true, "forbidden"},
			{"NotACertificate", map[string]any{"send": p.send, "resource": "web.web", "csr": csrFor(t, "web.m1.mesh")},
				403, "declares no certificate web.web", true, "forbidden"},
			{"NotACSR", map[string]any{"send": p.send, "resource": "web.cert", "csr": "hello"},
				400, "not a PEM CERTIFICATE REQUEST", true, "invalid"},
			{"UnknownField", map[string]any{"send": p.send, "resource": "web.cert", "csr": "x", "key": "secret"},
				400, "key", false, "invalid"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/service-certificates", Token: en.Token, Body: tc.body})
				var prob struct{ Type, Detail string }
				_ = json.Unmarshal(b, &prob)
				if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
					!strings.Contains(prob.Detail, tc.detail) {
					t.Fatalf("= %d %s %s, want %d saying %q", resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status, tc.detail)
				}
				if tc.audited && !hasAudit(audited(e), "service-certificate-refused", "machine/m1") {
					t.Fatal("refusal not audited")
				}
			})
		}
		// A host repeating a refused request with a resource of 900 KiB
		// is refused by its shape, and its refusals are one row a minute,
		// cut to a few lines: they cannot write the store full.
		t.Run("RepeatedRefusalsKeptSparse", func(t *testing.T) {
			huge := strings.Repeat("R", 900<<10)
			for range 20 {
				resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/service-certificates", Token: en.Token,
					Body: map[string]any{"send": p.send, "resource": huge, "csr": "x"}})
				if resp.StatusCode != 400 || !strings.Contains(string(b), "is not a resource id") || len(b) > 4<<10 {
					t.Fatalf("= %d %.300s (%d bytes)", resp.StatusCode, b, len(b))
				}
			}
			rows := 0
			for _, ev := range audited(e) {
				if ev.Action == "service-certificate-refused" {
					rows++
					if len(ev.Detail) > models.MaxAuditDetail {
						t.Fatalf("a refusal's row keeps %d bytes", len(ev.Detail))
					}
				}
			}
			if rows > 2 {
				t.Fatalf("%d refusal rows for one machine within a minute, want at most 2 (the earlier cases' and these)", rows)
			}
		})
	})
}

// TestPoll_BadSchemaHeader: a schema list that does not parse is 400,
// saying what is wrong, and records nothing.
func TestPoll_BadSchemaHeader(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := pollSchema(e, en.Token, 0, "1,x")
		if p.status != 400 || !strings.Contains(string(p.body), `\"x\" is not a schema number`) {
			t.Fatalf("= %d %s", p.status, p.body)
		}
		var m machineHeld
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		if m.Schema != "1" {
			t.Fatalf("schema = %q after a refused poll", m.Schema)
		}
	})
}

// TestSchema_HostInfoWrittenAgainAfterAFailedWrite: when writing what a
// poll's host said of itself fails (the store refuses it here; in life a
// lock waited on past the request, a lost connection, a full disk), the
// poll fails, and the host's next poll, saying the same, writes it: the
// schema change bumps the generation and the store records the version.
// (The controller once remembered the values as written and never wrote
// them: the store composed for the host's old schemas until a restart,
// and judged a trial by them.)
func TestSchema_HostInfoWrittenAgainAfterAFailedWrite(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := pollSchema(e, en.Token, 0, "1")
		if p.status != 200 {
			t.Fatalf("first poll: %d %s", p.status, p.body)
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied"})

		refuse, allow := []string{
			`CREATE TRIGGER refuse_host_info BEFORE UPDATE OF host_version ON machines
			 WHEN NEW.host_version = '2.0.0' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
		}, []string{`DROP TRIGGER refuse_host_info`}
		if e.Ctl.Store.Dialect() == store.Postgres {
			refuse = []string{
				`CREATE FUNCTION refuse_host_info() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
				`CREATE TRIGGER refuse_host_info BEFORE UPDATE OF host_version ON machines FOR EACH ROW
				 WHEN (NEW.host_version = '2.0.0') EXECUTE FUNCTION refuse_host_info()`,
			}
			allow = []string{`DROP TRIGGER refuse_host_info ON machines`, `DROP FUNCTION refuse_host_info()`}
		}
		for _, q := range refuse {
			if err := e.Ctl.Store.DB().Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
		h := map[string]string{"X-Mesh-Host-Version": "2.0.0", "X-Mesh-Schema": "1,2", "If-None-Match": `"1"`}
		resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token, Header: h})
		if resp.StatusCode != 500 {
			t.Fatalf("poll while the store refuses: %d %s, want 500", resp.StatusCode, b)
		}
		for _, q := range allow {
			if err := e.Ctl.Store.DB().Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}

		resp, b = e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token, Header: h})
		if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"2"` {
			t.Fatalf("the next poll: %d %s %s, want 200 with generation 2 (the schema change's bump)", resp.StatusCode, resp.Header.Get("ETag"), b)
		}
		var m struct {
			HostVersion string `json:"host_version"`
			Schema      string `json:"schema"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		if m.HostVersion != "2.0.0" || m.Schema != "1,2" {
			t.Errorf("the store says host %q schemas %q, want 2.0.0 and 1,2", m.HostVersion, m.Schema)
		}
	})
}

// TestComposeFailure_RecordedAfterAFailedWrite: when recording why a
// generation cannot be composed fails, the next attempt to compose it
// records it (the hub once remembered it as recorded before the write,
// so the overview never showed the reason).
func TestComposeFailure_RecordedAfterAFailedWrite(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.Enroll("m1") // never polls: nothing is composed ahead of it
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "needs-port"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "needs-port", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/p.conf", "content": "port=${var.port}\n"}]}`, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %s", b)
		}
		refuse, allow := []string{
			`CREATE TRIGGER refuse_compose_error BEFORE UPDATE OF compose_error ON machines
			 WHEN NEW.compose_error <> '' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`,
		}, []string{`DROP TRIGGER refuse_compose_error`}
		if e.Ctl.Store.Dialect() == store.Postgres {
			refuse = []string{
				`CREATE FUNCTION refuse_compose_error() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`,
				`CREATE TRIGGER refuse_compose_error BEFORE UPDATE OF compose_error ON machines FOR EACH ROW
				 WHEN (NEW.compose_error <> '') EXECUTE FUNCTION refuse_compose_error()`,
			}
			allow = []string{`DROP TRIGGER refuse_compose_error ON machines`, `DROP FUNCTION refuse_compose_error()`}
		}
		exec := func(qs []string) {
			for _, q := range qs {
				if err := e.Ctl.Store.DB().Exec(q).Error; err != nil {
					t.Fatal(err)
				}
			}
		}
		exec(refuse)
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "needs-port"}}}}, 200, nil)
		m, err := e.Ctl.Store.Machine(context.Background(), "m1")
		if err != nil {
			t.Fatal(err)
		}
		// The hub has heard of generation 2 (on PostgreSQL by notification).
		testwait.Until(10*time.Second, func() bool { return e.Ctl.Hub.View(m.ID).Gen == 2 })
		compose := func() {
			if c, err := e.Ctl.Hub.ComposeOne(context.Background(), m.ID, "m1", e.Ctl.Hub.View(m.ID), true); c != nil || err != nil {
				t.Fatalf("composed %v, %v; want nothing (a variable is missing)", c, err)
			}
		}
		compose() // recording the reason fails
		exec(allow)
		compose()
		var got struct {
			ComposeError string `json:"compose_error"`
		}
		// Recorded by this compose, or by the hub's own compose of the
		// change if that one marked the generation first: either way,
		// soon.
		testwait.Until(10*time.Second, func() bool {
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &got)
			return strings.Contains(got.ComposeError, "port")
		})
		if !strings.Contains(got.ComposeError, "port") {
			t.Errorf("compose_error %q, want the missing variable named", got.ComposeError)
		}
	})
}

// TestPoll_HostInfoChangesLimited: a host credential whose polls flip the
// schemas they advertise made each poll a new generation, a declaration
// and an audit row (13,000 in ten seconds from one client). Past ten
// changes within minutes a poll is refused (429, Retry-After), nothing of
// it recorded, and the refusal is audited.
func TestPoll_HostInfoChangesLimited(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		refused := 0
		for i := range 30 {
			schema := []string{"1", "1,2"}[i%2]
			resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=0s", Token: en.Token,
				Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": schema}})
			switch resp.StatusCode {
			case 200, 304:
			case 429:
				refused++
				if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "changes of host version or schemas") {
					t.Fatalf("refusal: %s %s", resp.Header, b)
				}
			default:
				t.Fatalf("poll %d: %d %s", i, resp.StatusCode, b)
			}
		}
		var m struct {
			Generation int64 `json:"generation"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		if refused < 15 || m.Generation > 12 {
			t.Fatalf("%d of 30 flipping polls refused, generation %d: the flips are not bounded", refused, m.Generation)
		}
		var audit struct {
			Items []struct {
				Action string `json:"action"`
				Detail string `json:"detail"`
			} `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=50", Token: e.Admin}, 200, &audit)
		found := 0
		for _, a := range audit.Items {
			if a.Action == "host-refused" && strings.Contains(a.Detail, "host version or schemas changed") {
				found++
			}
		}
		if found != 1 {
			t.Fatalf("%d audit rows of the refusals, want 1 (once a minute)", found)
		}
	})
}

// TestSchema_AHostWithoutSchema2IsHeldBackToWhatItApplied: a host that
// decodes 1 and a later 3 but not 2 (2 retired, as "How a field is
// retired" allows) cannot take schema-2 content, so it is held back — sent
// the schema-1 content it applied, whole, as a host of 1 alone is. What
// holding it back needs was read only for hosts whose highest schema was
// below the latest: it was sent nothing, and its machine said the
// declaration it applied was not on record and no release decoded 2.
func TestSchema_AHostWithoutSchema2IsHeldBackToWhatItApplied(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := pollSchema(e, en.Token, 0, "1")
		if p.status != 200 {
			t.Fatalf("first poll: %d %s", p.status, p.body)
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied"})
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "web", certModule, []byte("tree"), ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
			t.Fatalf("release: %d %s", resp.StatusCode, b)
		}
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "web"}}}}, 200, nil)

		p = pollSchema(e, en.Token, 1, "1,3")
		m, _ := e.Ctl.Store.Machine(context.Background(), "m1")
		if p.status != 200 || !strings.Contains(m.HeldBack, "needs host schema 2; host 1.0.0 decodes 1,3; release 1.5.0 decodes 1,2") {
			t.Fatalf("a host decoding 1,3 was sent (%d); compose error %q, held back %q", p.status, m.ComposeError, m.HeldBack)
		}
		d := verify(t, en, p.body)
		if d.Schema != 1 || len(d.Resources) != 0 {
			t.Fatalf("held-back declaration: %+v", d)
		}
	})
}

// TestSchema_AHostOfOnlyALaterSchemaAfterApplyingIsToldTruly: a machine
// that applied generation 1 whose host then decoded only schema 3 was
// sent nothing, rightly, but told that the declaration it applied was not
// on record — it was, only never read.
func TestSchema_AHostOfOnlyALaterSchemaAfterApplyingIsToldTruly(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := pollSchema(e, en.Token, 0, "1")
		if p.status != 200 {
			t.Fatalf("first poll: %d %s", p.status, p.body)
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied"})
		p = pollSchema(e, en.Token, 1, "3")
		m, _ := e.Ctl.Store.Machine(context.Background(), "m1")
		why := m.HeldBack + m.ComposeError
		if !strings.Contains(why, "needs a newer controller") || strings.Contains(why, "is not on record") {
			t.Fatalf("poll %d; the machine says %q", p.status, why)
		}
	})
}
