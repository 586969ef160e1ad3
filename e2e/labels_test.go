package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

const labelManifest = `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/web.conf", "content": "served by ${machine.name}\n", "mode": "0644"}]}`

// TestLabels_ALabelGivesAMachineTheModule: a module targets role=web; a
// real host gets it when an operator labels its machine role=web (a new
// generation, trigger label) and loses it, in full, when the label goes.
func TestLabels_ALabelGivesAMachineTheModule(t *testing.T) {
	c := startController(t, store.SQLite)
	c.module("web")
	c.upload("web", labelManifest, nil)
	resp := c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules/web", Token: c.Admin}, 200, nil)
	c.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/modules/web", Token: c.Admin,
		Header: map[string]string{"If-Match": resp.Header.Get("ETag")}, Body: map[string]any{"selector": "role=web"}}, 200, nil)
	h := enroll(t, c, "m1", c.URL)
	h.start()
	c.waitApplied("m1", 30*time.Second)
	conf := filepath.Join(h.Root, "etc/web.conf")
	if exists(conf) {
		t.Fatal("m1 has web before it was labelled")
	}

	c.put("/api/v1/machines/m1/labels", c.machine("m1").Generation, map[string]any{"labels": map[string]string{"role": "web"}})
	m := c.waitApplied("m1", 30*time.Second)
	if b, err := os.ReadFile(conf); err != nil || string(b) != "served by m1\n" {
		t.Fatalf("m1's web.conf: %q %v", b, err)
	}
	if ss := c.sends("m1"); len(ss) == 0 || ss[0].Generation != m.Generation || ss[0].Trigger != "label" || ss[0].Outcome != "applied" {
		t.Fatalf("latest send %+v", ss)
	}

	c.put("/api/v1/machines/m1/labels", c.machine("m1").Generation, map[string]any{"labels": map[string]string{"role": "db"}})
	c.waitApplied("m1", 30*time.Second)
	waitFor(t, 10*time.Second, "web.conf removed", func() bool { return !exists(conf) })
}
