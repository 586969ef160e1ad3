package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controller"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
)

// TestMeshctl_LoginPinsTheMeshCA: against a controller serving TLS under
// the mesh CA, login with the CA's pin finds the CA before the password is
// sent, keeps it, and later commands trust it alone; a wrong pin is refused
// naming both pins, and nothing is saved; without a pin the system's roots
// do not know the mesh CA, so the controller is refused.
func TestMeshctl_LoginPinsTheMeshCA(t *testing.T) {
	mc := buildMeshctl(t)
	sc := storetest.Config(t, store.SQLite)
	var out bytes.Buffer
	c, err := controller.Start(context.Background(), controller.Config{Listen: "127.0.0.1:0", DataDir: sc.DataDir,
		DatabaseURL: sc.DatabaseURL, Out: &out, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DrainTimeout: 5 * time.Second, TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	m := regexp.MustCompile(`password: (\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no admin password printed:\n%s", out.String())
	}
	pw, url, pin := m[1]+"\n", "https://"+c.Addr.String(), c.CA.Pin()
	cfgPath := filepath.Join(mc.cfg, "mesh", "config.json")

	t.Run("ErrNoPin", func(t *testing.T) {
		r := mc.run(pw, "login", url, "--user", "admin", "--password-stdin")
		if r.code == 0 || !strings.Contains(r.stderr, "certificate signed by unknown authority") || !strings.Contains(r.stderr, "log in with --ca-pin") {
			t.Fatalf("want a refusal of the unknown CA: %s", r)
		}
	})
	t.Run("ErrPlainURL", func(t *testing.T) {
		// Go's TLS server answers plain HTTP with a 400 of its own words.
		plain := "http://" + c.Addr.String()
		r := mc.run(pw, "login", plain, "--user", "admin", "--password-stdin")
		if r.code == 0 || !strings.Contains(r.stderr, "serves TLS: use "+url) {
			t.Fatalf("want a refusal naming the https URL: %s", r)
		}
	})
	t.Run("ErrWrongPin", func(t *testing.T) {
		wrong := "sha256:" + strings.Repeat("0", 64)
		r := mc.run(pw, "login", url, "--user", "admin", "--password-stdin", "--ca-pin", wrong)
		if r.code == 0 || !strings.Contains(r.stderr, "expected CA pin "+wrong) || !strings.Contains(r.stderr, "saw "+pin) {
			t.Fatalf("want a pin mismatch naming both pins: %s", r)
		}
		if _, err := os.Stat(cfgPath); err == nil {
			t.Fatal("a refused login saved a config")
		}
	})
	t.Run("OK", func(t *testing.T) {
		if r := mc.run(pw, "login", url, "--user", "admin", "--password-stdin", "--ca-pin", pin); r.code != 0 {
			t.Fatalf("login with the pin: %s", r)
		}
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		var cfg config
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		ca, err := meshca.ParsePEM([]byte(cfg.CA))
		if err != nil || meshca.Pin(ca) != pin {
			t.Fatalf("saved CA: %v; want the CA of pin %s", err, pin)
		}
		var page struct{ Items []any }
		mc.ok(&page, "machines", "ls", "-o", "json") // over TLS, trusting the saved CA alone
	})
}
