package api_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
	"mesh/testwait"
)

const manifestWithVar = `{"resources": [
  {"name": "config", "kind": "file", "path": "/etc/node-tools.conf", "content": "port=${var.port}\nname=${machine.name}\n", "mode": "0644"},
  {"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run"], "after": ["config"], "check": {"tcp": "127.0.0.1:${var.port}"}}
]}`

// poll is one long poll of a host.
type poll struct {
	status int
	etag   string
	send   string
	body   []byte
	took   time.Duration
}

func doPoll(e *ctltest.Env, token string, known int64, wait string) poll {
	e.T.Helper()
	h := map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1"}
	if known > 0 {
		h["If-None-Match"] = fmt.Sprintf(`"%d"`, known)
	}
	start := time.Now()
	resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=" + wait, Token: token, Header: h})
	return poll{status: resp.StatusCode, etag: resp.Header.Get("ETag"), send: resp.Header.Get("X-Mesh-Send"), body: b, took: time.Since(start)}
}

// verify checks an envelope against the enrolled keys and decodes it.
func verify(t *testing.T, en ctltest.Enrolled, body []byte) models.DeclarationPayload {
	t.Helper()
	var env models.Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("envelope: %v", err)
	}
	ok := false
	for _, s := range env.Signatures {
		for _, k := range en.Keys {
			if k.KeyID == s.KeyID && ed25519.Verify(ed25519.PublicKey(k.PublicKey), env.Payload, s.Sig) {
				ok = true
			}
		}
	}
	if !ok {
		t.Fatal("envelope does not verify with the enrolled keys")
	}
	var p models.DeclarationPayload
	dec := json.NewDecoder(bytes.NewReader(env.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("payload: %v", err)
	}
	return p
}

// firstVariables writes a machine's variables for the first time (port
// 9000, at its first generation): the simplest change that bumps it.
func firstVariables(e *ctltest.Env, machine string) {
	e.T.Helper()
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + machine + "/variables", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"port": "9000"}}}, 200, nil)
}

func report(e *ctltest.Env, token string, r map[string]any) {
	e.T.Helper()
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: token, Body: r}, 201, nil)
}

func each(t *testing.T, f func(t *testing.T, e *ctltest.Env)) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) { f(t, ctltest.Start(t, d)) })
	}
}

func TestHostProtocol_EndToEnd(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "node-tools"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "node-tools", manifestWithVar, []byte("tree bytes"), ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}

		// The enrolment generation comes at once; the host applies it.
		p := doPoll(e, en.Token, 0, "5s")
		if p.status != 200 || p.etag != `"1"` || p.send == "" {
			t.Fatalf("first poll: %d %s %q", p.status, p.etag, p.body)
		}
		if d := verify(t, en, p.body); d.Machine != "m1" || d.Generation != 1 || len(d.Resources) != 0 {
			t.Fatalf("enrolment declaration: %+v", d)
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied", "digest": models.DigestOf(nil)})

		// Nothing new: 304 after wait.
		p = doPoll(e, en.Token, 1, "300ms")
		if p.status != 304 || p.took < 300*time.Millisecond {
			t.Fatalf("idle poll: %d after %v", p.status, p.took)
		}

		// A waiting poll wakes when an assignment commits.
		var vars, as struct{}
		resp := e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"port": "9000"}}}, 200, &vars)
		if resp.Header.Get("ETag") != `"2"` {
			t.Fatalf("variables ETag %q", resp.Header.Get("ETag"))
		}
		report(e, en.Token, map[string]any{"generation": 2, "outcome": "applied"})
		var wg sync.WaitGroup
		var woke poll
		wg.Add(1)
		go func() { defer wg.Done(); woke = doPoll(e, en.Token, 2, "30s") }()
		waitFor(t, 5*time.Second, func() bool { return e.Ctl.Hub.Polling("m1") })
		assigned := time.Now()
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"2"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools"}}}}, 200, &as)
		wg.Wait()
		if woke.status != 200 || woke.etag != `"3"` {
			t.Fatalf("woken poll: %d %s %s", woke.status, woke.etag, woke.body)
		}
		if lag := time.Since(assigned); lag > 3*time.Second {
			t.Fatalf("woken poll answered %v after the change", lag)
		}
		d := verify(t, en, woke.body)
		if len(d.Resources) != 2 || *d.Resources[0].Content != "port=9000\nname=m1\n" || d.Resources[1].Check.TCP != "127.0.0.1:9000" {
			t.Fatalf("declaration resources: %+v", d.Resources)
		}
		if d.Resources[1].After[0] != "node-tools.config" {
			t.Fatalf("after not prefixed: %v", d.Resources[1].After)
		}

		// The send row exists, naming instance and trigger, before any report.
		var sends struct {
			Items []models.SendView `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/sends", Token: e.Admin}, 200, &sends)
		if len(sends.Items) != 2 || sends.Items[0].ID != woke.send || sends.Items[0].InstanceID != e.Ctl.Instance ||
			sends.Items[0].Trigger != "assignment" || sends.Items[0].Generation != 3 || sends.Items[0].Outcome != "" {
			t.Fatalf("sends: %+v", sends.Items)
		}
		var env models.Envelope
		_ = json.Unmarshal(woke.body, &env)
		if sends.Items[0].Digest != models.DigestOf(env.Payload) {
			t.Fatalf("send digest %s, payload %s", sends.Items[0].Digest, models.DigestOf(env.Payload))
		}

		// A report marks it applied.
		report(e, en.Token, map[string]any{"send": woke.send, "generation": 3, "outcome": "applied",
			"digest": sends.Items[0].Digest, "future_field": "kept",
			"running": map[string]any{"node-tools": map[string]any{"build": 1}}})
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/sends", Token: e.Admin}, 200, &sends)
		if sends.Items[0].Outcome != "applied" {
			t.Fatalf("send outcome %q", sends.Items[0].Outcome)
		}
		var m struct {
			State             string `json:"state"`
			AppliedGeneration int64  `json:"applied_generation"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		if m.State != "current" || m.AppliedGeneration != 3 {
			t.Fatalf("machine after report: %+v", m)
		}

		// A second writer with the old If-Match gets 412 and changes nothing.
		resp, b := e.Do(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"2"`}, Body: map[string]any{"assignments": []map[string]any{}}})
		if resp.StatusCode != 412 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("stale write: %d %s", resp.StatusCode, b)
		}
		var got struct {
			Assignments []map[string]any `json:"assignments"`
		}
		resp = e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &got)
		if len(got.Assignments) != 1 || resp.Header.Get("ETag") != `"3"` {
			t.Fatalf("after stale write: %v %s", got, resp.Header.Get("ETag"))
		}

		// Two polls of one generation get byte-identical payloads.
		a, b2 := doPoll(e, en.Token, 2, "1s"), doPoll(e, en.Token, 2, "1s")
		if a.status != 200 || !bytes.Equal(a.body, b2.body) || a.send == b2.send {
			t.Fatalf("re-polls of generation 3: %d, equal=%v, sends %s %s", a.status, bytes.Equal(a.body, b2.body), a.send, b2.send)
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/sends?limit=2", Token: e.Admin}, 200, &sends)
		if len(sends.Items) != 2 || sends.Items[0].ID != b2.send {
			t.Fatalf("global sends newest first: %+v", sends.Items)
		}
	})
}

// TestStaleIfMatch_EveryWriteRoute: 428 without If-Match, 412 when stale.
func TestStaleIfMatch_EveryWriteRoute(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1")
	for _, r := range []ctltest.Request{
		{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Body: map[string]any{"assignments": []any{}}},
		{Method: "PUT", Path: "/api/v1/machines/m1/variables", Body: map[string]any{"variables": map[string]string{}}},
		{Method: "POST", Path: "/api/v1/machines/m1/push"},
	} {
		r.Token = e.Admin
		if resp, b := e.Do(r); resp.StatusCode != 428 {
			t.Errorf("%s %s without If-Match: %d %s", r.Method, r.Path, resp.StatusCode, b)
		}
		r.Header = map[string]string{"If-Match": `"0"`}
		if resp, b := e.Do(r); resp.StatusCode != 412 {
			t.Errorf("%s %s stale: %d %s", r.Method, r.Path, resp.StatusCode, b)
		}
	}
	var m struct{ Generation int64 }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
	if m.Generation != 1 {
		t.Fatalf("refused writes changed the generation to %d", m.Generation)
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	testwait.For(t, d, "condition", cond)
}

func itoa(n int64) string { return fmt.Sprint(n) }
