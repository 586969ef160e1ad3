package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/testwait"
)

// TestDemo_ALivingMesh runs the demo as the README gives it: its three
// hosts enrol over TLS under the mesh CA and apply their declarations, the
// banner's "try" line turns demo-2's check failing (said by the API with
// the check's words), and Ctrl-C removes everything it made.
func TestDemo_ALivingMesh(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0"}, strings.NewReader(""), &out, &errOut)
	}()
	banner := regexp.MustCompile(`(?s)password: (\S+).* in (\S+), over TLS.*dashboard: (https://\S+)/ .*trust (\S+),.*try: +rm (\S+) `)
	var m []string
	testwait.For(t, time.Minute, "the demo's banner", func() bool {
		m = banner.FindStringSubmatch(out.String())
		return m != nil
	})
	password, dir, url, caFile, breakIt := m[1], m[2], m[3], m[4], m[5]

	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	call := func(method, path, token, body string, v any) error {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return errors.New(resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(v)
	}
	var login struct{ Token string }
	if err := call("POST", "/api/v1/auth/login", "", `{"username":"admin","password":"`+password+`"}`, &login); err != nil {
		t.Fatalf("login with the banner's password: %v", err)
	}
	type machine struct {
		Name, State string
		Health      struct{ State, Check, Detail string }
	}
	machines := func() map[string]machine {
		var l struct{ Items []machine }
		if err := call("GET", "/api/v1/machines", login.Token, "", &l); err != nil {
			t.Fatal(err)
		}
		by := map[string]machine{}
		for _, m := range l.Items {
			by[m.Name] = m
		}
		return by
	}
	var by map[string]machine
	if !testwait.Until(time.Minute, func() bool {
		by = machines()
		return len(by) == 3 && by["demo-1"].State == "current" && by["demo-2"].State == "current" && by["demo-3"].State == "current" &&
			by["demo-2"].Health.State == "passing"
	}) {
		t.Fatalf("the demo's three hosts did not apply their declarations: %+v\n%s", by, errOut.String())
	}

	if err := os.Remove(breakIt); err != nil {
		t.Fatalf("the banner's try line names %s: %v", breakIt, err)
	}
	if !testwait.Until(time.Minute, func() bool {
		by = machines()
		h := by["demo-2"].Health
		return h.State == "failing" && h.Check == "hello.service" && strings.Contains(h.Detail, "exit status 1") && strings.Contains(h.Detail, "hello.conf is missing")
	}) {
		t.Fatalf("demo-2's health after the try line: %+v", by["demo-2"])
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the demo ended with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the demo did not stop")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the demo left %s behind (%v)", dir, err)
	}
}
