package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestControllerBehindItsStore: an older controller build (one that lacks
// migration 4) started against the store migration 4 made does not crash
// loop: it serves what it can, says "behind the store" in /readyz, and
// answers what it cannot serve with a problem+json that says why.
func TestControllerBehindItsStore(t *testing.T) {
	c := startController(t, store.SQLite)
	c.module("conf")
	c.upload("conf", `{"resources": []}`, nil)
	admin := c.Admin
	c.stop()
	c.binary = "mesh-controller-schema3"
	c.start()
	c.Admin = admin
	c.Env = ctltest.Attach(t, c.URL, admin)

	resp, err := http.Get(c.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Status      string `json:"status"`
		StoreSchema int64  `json:"store_schema"`
		KnownSchema int64  `json:"known_schema"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if resp.StatusCode != 200 || ready.Status != "behind the store" || ready.StoreSchema != 4 || ready.KnownSchema != 3 {
		t.Fatalf("readyz: %d %+v", resp.StatusCode, ready)
	}
	// It serves what it can: reading and changing modules, enrolling and
	// serving a host.
	c.module("more")
	h := enroll(t, c, "m1", c.URL)
	h.start()
	c.assign("m1", "conf")
	c.waitApplied("m1", 30*time.Second)
	// What it cannot serve says why.
	req, _ := http.NewRequest("GET", c.URL+"/api/v1/a-route-of-a-newer-build", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 501 || !strings.Contains(string(body), "behind-store") || !strings.Contains(string(body), "the store is at 4") {
		t.Fatalf("an unknown route: %d %s", resp.StatusCode, body)
	}
}
