package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestControllerBehindItsStore: an older controller build (one that stops
// at migration 3) started against a store later migrations made does not crash
// loop: it serves what it can, says "behind the store" in /readyz, and
// answers what it cannot serve with a problem+json that says why.
func TestControllerBehindItsStore(t *testing.T) {
	c := startController(t, store.SQLite)
	c.module("conf")
	c.upload("conf", `{"resources": []}`, nil)
	admin, pw := c.Admin, c.AdminPW
	c.stop()
	c.binary = "mesh-controller-schema3"
	c.start()
	c.Admin, c.AdminPW = admin, pw
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
	if resp.StatusCode != 200 || ready.Status != "behind the store" || ready.StoreSchema <= 3 || ready.KnownSchema != 3 {
		t.Fatalf("readyz: %d %+v", resp.StatusCode, ready)
	}
	// It serves what it can: reading and changing modules, enrolling and
	// serving a host.
	c.module("more")
	h := enroll(t, c, "m1", c.URL)
	h.start()
	c.assign("m1", "conf")
	c.waitApplied("m1", 30*time.Second)
	// The dashboard says so too.
	b := newWebSession(t, c.URL, "admin", c.AdminPW)
	if page := b.get("/"); !strings.Contains(page, fmt.Sprintf("Behind the store: this controller (build 0) knows store schema 3; the store is at %d", ready.StoreSchema)) {
		t.Fatalf("the dashboard does not say it is behind:\n%.600s", page)
	}
	// What it cannot serve says why.
	req, _ := http.NewRequest("GET", c.URL+"/api/v1/a-route-of-a-newer-build", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 501 || !strings.Contains(string(body), "behind-store") || !strings.Contains(string(body), fmt.Sprintf("the store is at %d", ready.StoreSchema)) {
		t.Fatalf("an unknown route: %d %s", resp.StatusCode, body)
	}
}

// webSession is a person in the dashboard over plain HTTP (cookies kept).
type webSession struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newWebSession(t *testing.T, base, user, pw string) *webSession {
	jar, _ := cookiejar.New(nil)
	w := &webSession{t: t, base: base, c: &http.Client{Jar: jar}}
	page := w.get("/login")
	m := regexp.MustCompile(`name="_csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on the login page")
	}
	resp, err := w.c.PostForm(base+"/login", url.Values{"_csrf": {m[1]}, "username": {user}, "password": {pw}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return w
}

func (w *webSession) get(path string) string {
	resp, err := w.c.Get(w.base + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
