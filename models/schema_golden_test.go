package models

import (
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/schema1_golden.json from today's composing")

// goldenInput is a fixed declaration with every schema-1 field in use: a
// tree from the build's artifact, a file with a mode, a service with env,
// after, every check kind's fields and on_remove, and a host release.
func goldenInput() ComposeInput {
	content := "port=${var.PORT}\nname=${machine.name}\n"
	man := Manifest{Resources: []ManifestResource{
		{Name: "runtime", Kind: "tree", Path: "/opt/node-tools", OnRemove: "forget"},
		{Name: "config", Kind: "file", Path: "/etc/node-tools/${machine.name}.conf", Content: &content, Mode: "0640"},
		{Name: "service", Kind: "service", Command: []string{"/opt/node-tools/bin/run", "--port", "${var.PORT}"},
			Env: map[string]string{"B": "2", "A": "${var.PORT}"}, After: []string{"runtime", "config"},
			Check: &Check{TCP: "127.0.0.1:${var.PORT}", Interval: "10s", Timeout: "2s"}},
		{Name: "web", Kind: "service", Command: []string{"/opt/node-tools/bin/web"},
			Check: &Check{HTTP: "http://127.0.0.1:8080/healthz", Status: 204}},
		{Name: "probe", Kind: "service", Command: []string{"/opt/node-tools/bin/probe"},
			Check: &Check{Exec: []string{"/bin/true", "x"}}},
	}}
	raw, _ := json.Marshal(man)
	return ComposeInput{
		Machine: "m1", Generation: 42, EmptyOK: false,
		ComposedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), ComposedBy: "ctl-7f3a",
		Variables: map[string]string{"PORT": "9000"},
		Host: &HostRelease{Version: "1.4.2", OS: "linux", Arch: "amd64",
			Digest: "sha256:" + "ab" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd"[:62],
			Size:   9123456, URL: "/api/v1/blobs/sha256:x", KeyID: "k1", Signature: []byte{1, 2, 3}},
		Modules: []ComposeModule{{Name: "node-tools", Build: 17,
			Digest: "sha256:" + "cd" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd"[:62],
			Size:   52311, Manifest: string(raw)}},
	}
}

// TestSchema1_GoldenBytes pins the schema-1 payload byte for byte: the
// file was written by the code before schema 2 existed, and a schema-1
// host decodes exactly these bytes (composed_* are fixed by the input).
func TestSchema1_GoldenBytes(t *testing.T) {
	p, err := ComposePayload(goldenInput())
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if *updateGolden {
		if err := os.WriteFile("testdata/schema1_golden.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/schema1_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("schema-1 payload changed:\n got %s\nwant %s", got, want)
	}
}
