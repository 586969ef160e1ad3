package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"mesh/cmd/internal/cli"
	"mesh/controller"
	"mesh/meshca"
	"mesh/testwait"
	"mesh/version"
)

// syncBuffer is an output a serving controller writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runCtl runs one mesh-controller command line as main would, and fails the
// test if it does not end within a minute: a command line that serves when
// it should not never ends.
func runCtl(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	// Should the command line serve after all, it does so on a free port.
	t.Setenv("MESH_LISTEN", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, strings.NewReader(stdin), &out, &errOut) }()
	select {
	case err := <-done:
		return cli.Exit("mesh-controller", err, &errOut), out.String(), errOut.String()
	case <-time.After(time.Minute):
		cancel()
		<-done
		t.Fatalf("%v did not end (served?):\n%s%s", args, out.String(), errOut.String())
		return 0, "", ""
	}
}

// TestUserAdd_FlagsBeforeSubcommand pins the failure where
// `mesh-controller --data X user add carol …` served and printed a new
// admin password instead of adding carol.
func TestUserAdd_FlagsBeforeSubcommand(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, out, errOut := runCtl(t, "a long enough password\n", "--data", data, "user", "add", "carol", "--role", "admin", "--password-stdin")
	if code != 0 || out != "user carol added (role admin)\n" {
		t.Fatalf("exit %d, %q\n%s", code, out, errOut)
	}
	// The same store, with the flags after the subcommand and the name.
	code, out, errOut = runCtl(t, "another long password\n", "user", "add", "carol", "--password-stdin", "--role=operator", "--data", data)
	if code != 0 || out != "user carol updated (role operator, new password); every session and API token carol held is revoked (a controller serving this store refuses them within its heartbeat, 15s by default)\n" {
		t.Fatalf("again: exit %d, %q\n%s", code, out, errOut)
	}
}

// TestUnknownCommand_IsAnError pins the failure where
// `mesh-controller --data X demo-typo` served on :8080.
func TestUnknownCommand_IsAnError(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, out, errOut := runCtl(t, "", "--data", data, "demo-typo")
	if code != cli.ExitUsage || !strings.Contains(errOut, `unknown command "demo-typo"`) || !strings.Contains(errOut, "did you mean demo") {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"user", "ad", "carol"}, {"user"}, {"serve", "--no-such-flag"}, {"migrate", "extra"}, {"user", "add"}} {
		if code, _, errOut := runCtl(t, "", append([]string{"--data", data}, args...)...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, code, cli.ExitUsage, errOut)
		}
	}
}

// TestHelp_Everywhere pins the failure where `mesh-controller --help`
// listed no subcommands and exited 1: every command's --help lists its
// subcommands and flags and exits 0.
func TestHelp_Everywhere(t *testing.T) {
	code, out, errOut := runCtl(t, "", "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"serve", "migrate", "user", "demo", "version", "--data", "--listen"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not list %s:\n%s", want, out)
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		code, out, errOut := runCtl(t, "", append(path, "--help")...)
		if code != 0 || !strings.Contains(out, "--data") {
			t.Errorf("%v --help: exit %d, no --data:\n%s%s", path, code, out, errOut)
		}
		for _, sub := range c.Commands() {
			if !strings.Contains(out, sub.Name()) {
				t.Errorf("%v --help does not list %s", path, sub.Name())
			}
			walk(sub)
		}
	}
	walk(rootCommand(nil, nil, nil))
}

// TestBare_Serves: a bare `mesh-controller` (the README's
// `go run ./cmd/mesh-controller`) still starts the controller.
func TestBare_Serves(t *testing.T) {
	t.Setenv("MESH_DATA_DIR", filepath.Join(t.TempDir(), "data"))
	t.Setenv("MESH_LISTEN", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, strings.NewReader(""), &out, &errOut) }()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), "serving on") {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("ended without serving: %v\n%s%s", err, out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not serving after a minute:\n%s%s", out.String(), errOut.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// TestFlagsAnywhere: the store flags go before or after the subcommand,
// with two dashes or, as the standard flag package allowed, one.
func TestFlagsAnywhere(t *testing.T) {
	for name, args := range map[string][]string{
		"Before":     {"--data", "DATA", "migrate"},
		"After":      {"migrate", "--data=DATA", "--log-level", "warn"},
		"SingleDash": {"migrate", "-data", "DATA"},
	} {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "DATA", data)
			}
			code, out, errOut := runCtl(t, "", args...)
			if code != 0 || !strings.HasPrefix(out, "store schema at ") {
				t.Fatalf("exit %d, %q\n%s", code, out, errOut)
			}
			if m, _ := filepath.Glob(filepath.Join(data, "*")); len(m) == 0 {
				t.Fatalf("nothing in %s: the store was opened elsewhere", data)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"serve", "--version"}, {"user", "add", "--version"}, {"version"}} {
		code, out, _ := runCtl(t, "", args...)
		if code != 0 || out != "mesh-controller "+version.String()+"\n" {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
}

// TestServeTLS_KeepsTheCAForCurl: a controller serving TLS keeps the mesh
// CA's certificate in its data directory and says where, so curl
// --cacert and a browser can trust it; its pin is the one hosts are given.
func TestServeTLS_KeepsTheCAForCurl(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	t.Setenv("MESH_DATA_DIR", dir)
	t.Setenv("MESH_LISTEN", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--tls"}, strings.NewReader(""), &out, &errOut) }()
	defer func() { cancel(); <-done }()
	caFile := filepath.Join(dir, "mesh-ca.pem")
	testwait.For(t, time.Minute, "the banner names the CA file", func() bool { return strings.Contains(out.String(), "  CA:    "+caFile) })
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := meshca.ParsePEM(b)
	if err != nil {
		t.Fatal(err)
	}
	if pin := meshca.Pin(ca); !strings.Contains(out.String(), "mesh CA pin "+pin) {
		t.Fatalf("the CA file's pin %s is not the banner's:\n%s", pin, out.String())
	}
}

// TestBackup_RefusesAMissingStore: a backup of a data dir with no store
// fails, saying so, and makes none (opening it would have made an empty
// store, backed up without a word).
func TestBackup_RefusesAMissingStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo")
	var out bytes.Buffer
	err := backup(context.Background(), controller.Config{DataDir: dir}, filepath.Join(t.TempDir(), "b.db"), &out)
	if err == nil || !strings.Contains(err.Error(), "no store to back up") {
		t.Fatalf("backup of %s: %v", dir, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the data dir was made: %v", err)
	}
}

// Values that cannot be what their flag or variable means are refused
// rather than served without them: an unknown log level served at info,
// MESH_TLS=yes served plain HTTP, demo took --data and ignored it, and a
// negative --resync turned off the re-read that catches a missed
// notification.
func TestServe_RefusesWhatItWouldIgnore(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"--data", data, "--log-level", "loud"}, `--log-level "loud": debug, info, warn or error`},
		{"yes", []string{"--data", data}, `MESH_TLS: "yes": true or false`},
		{"", []string{"demo", "--data", data}, "demo --data: the demo runs on SQLite in a temporary directory"},
		{"", []string{"--data", data, "--max-upload", "12XB"}, `"12XB": a positive size`},
		{"", []string{"--data", data, "--resync", "-30s"}, "--resync -30s: a positive duration"},
		{"", []string{"--data", data, "--offline-after", "0s"}, "--offline-after 0s: a positive duration"},
		{"", []string{"--data", data, "--unhealthy-after", "-1m"}, "--unhealthy-after -1m0s: a positive duration"},
	} {
		t.Setenv("MESH_TLS", tc.env)
		code, out, errOut := runCtl(t, "", tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v (MESH_TLS=%q): exit %d, want a refusal saying %q\n%s%s", tc.args, tc.env, code, tc.want, out, errOut)
		}
	}
}
