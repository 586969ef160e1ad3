package api_test

import (
	"fmt"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
)

// TestServiceCertificate_AnotherInstancesNameRefused: two instances of one
// store, each advertised under its own name (hosts list both). A
// declaration giving a certificate resource instance B's name was refused
// by B (403) and signed by A, which knew only its own names: a mesh-CA
// certificate with server auth for B's name, with which the module's
// author could pose as B to every host and to meshctl.
func TestServiceCertificate_AnotherInstancesNameRefused(t *testing.T) {
	sc := storetest.Config(t, store.Postgres)
	a := ctltest.StartWith(t, sc, ctltest.Options{Advertise: []string{"ctl-a.mesh.example"}})
	b := ctltest.StartWith(t, sc, ctltest.Options{Advertise: []string{"ctl-b.mesh.example"}})
	en := a.Enroll("m1")
	p := pollSchema(a, en.Token, 0, "1,2")
	if p.status != 200 {
		t.Fatalf("first poll: %d %s", p.status, p.body)
	}
	var gen int64
	fmt.Sscanf(strings.Trim(p.etag, `"`), "%d", &gen)
	report(a, en.Token, map[string]any{"send": p.send, "generation": gen, "outcome": "applied"})
	a.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: a.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
	const manifest = `{"resources": [{"name": "cert", "kind": "certificate", "names": ["ctl-b.mesh.example"],
	  "path": "/etc/web/chain.pem", "key_path": "/etc/web/key.pem", "lifetime": "1h"}]}`
	if resp, body := a.Upload(a.Admin, "web", manifest, []byte("tree"), ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	a.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: a.Admin,
		Header: map[string]string{"If-Match": p.etag}, Body: map[string]any{"assignments": []map[string]any{{"module": "web"}}}}, 200, nil)
	if p = pollSchema(a, en.Token, gen, "1,2"); p.status != 200 {
		t.Fatalf("poll: %d %s", p.status, p.body)
	}
	req := map[string]any{"send": p.send, "resource": "web.cert", "csr": csrFor(t, "ctl-b.mesh.example")}
	for name, e := range map[string]*ctltest.Env{"B, whose name it is": b, "A": a} {
		resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/service-certificates", Token: en.Token, Body: req})
		if resp.StatusCode != 403 || !strings.Contains(string(body), "ctl-b.mesh.example is a name the controller serves under") {
			t.Errorf("asked of instance %s: %d %.300s", name, resp.StatusCode, body)
		}
	}
}
