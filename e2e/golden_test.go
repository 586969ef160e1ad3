package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// goldenManifest is schema-1 content touching every field a resource of
// the earlier commit has: a tree with its artifact and on_remove, a file
// with templated content and a mode, a service with a command, an
// environment, its order and a tcp check with interval and timeout.
const goldenManifest = `{"resources": [
  {"name": "runtime", "kind": "tree", "path": "/opt/node-tools", "on_remove": "forget"},
  {"name": "config", "kind": "file", "path": "/etc/node-tools.conf", "content": "port=${var.port}\nmachine=${machine.name}\n", "mode": "0600"},
  {"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run", "--port", "${var.port}", "--config", "/etc/node-tools.conf"],
   "env": {"MODE": "golden", "MACHINE": "${machine.name}"}, "after": ["runtime", "config"],
   "check": {"tcp": "127.0.0.1:${var.port}", "interval": "2s", "timeout": "1s"}}
]}`

// composedRE matches the two fields a payload may differ in between
// controllers: when it was composed and by which instance.
var composedRE = regexp.MustCompile(`"composed_(at|by)":"[^"]*"`)

// TestSchema1_PreviousReleaseGoldenDecode: schema 1 stays byte for byte
// what it was. The controller and the host of the earlier commit (built
// from its tree) declare a module to a machine; today's controller
// declares the same content (same module, manifest, artifact, variables,
// names, and the same steps, so the same generation) to another host of
// the earlier commit. That host decodes and applies today's declaration —
// the digest it applied is today's payload's — and today's payload is the
// earlier one byte for byte, composed_at and composed_by aside (a time,
// and the composing instance's random id).
func TestSchema1_PreviousReleaseGoldenDecode(t *testing.T) {
	prevCtl, prevHost := previousBinary(t, "mesh-controller"), previousHost(t)
	port, tree := freePort(t), runtimeTree(t)

	// declare runs a controller (binary "" is today's) and a host of the
	// earlier commit, declares the content to it, and returns the payload
	// of the generation that host applied.
	declare := func(binary string) []byte {
		t.Helper()
		c := &controllerProc{t: t, port: freePort(t), cfg: storetest.Config(t, store.SQLite), binary: binary, unvalidated: binary != ""}
		c.URL = "http://127.0.0.1:" + c.port
		t.Cleanup(c.stop) // first: a start that fails still stops the process and shows its log
		c.start()
		defer c.stop()
		c.module("node-tools")
		c.upload("node-tools", goldenManifest, tree)

		h := &hostProc{t: t, Name: "m1", State: filepath.Join(t.TempDir(), "state"), Root: filepath.Join(t.TempDir(), "root"), binary: prevHost}
		if err := os.MkdirAll(h.Root, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(filepath.Join(bin, prevHost), "enroll", "--controller", c.URL, "--join-token", c.JoinToken(),
			"--name", "m1", "--state", h.State).CombinedOutput(); err != nil {
			t.Fatalf("enrolling the earlier commit's host: %v\n%s", err, out)
		}
		defer h.cleanup() // its service too: the next run's host serves the same port
		c.setVars("m1", map[string]string{"port": port})
		c.assign("m1", "node-tools")
		h.start()
		m := c.waitApplied("m1", 60*time.Second)
		waitFor(t, 30*time.Second, "the service the earlier host started", func() bool { return listening(port) })

		// The stored generation, composed once: the bytes the poll sent.
		var pv struct {
			Generation int64           `json:"generation"`
			Digest     string          `json:"digest"`
			Envelope   models.Envelope `json:"envelope"`
		}
		c.JSON(ctlReq("/api/v1/machines/m1/declaration", c.Admin), 200, &pv)
		payload := pv.Envelope.Payload
		if pv.Generation != m.AppliedGeneration || models.DigestOf(payload) != pv.Digest {
			t.Fatalf("the declaration shown (generation %d, digest %s) is not the one applied (generation %d) or not its payload's",
				pv.Generation, pv.Digest, m.AppliedGeneration)
		}
		// The earlier host applied exactly these bytes.
		var st struct {
			Applied       int64  `json:"applied"`
			AppliedDigest string `json:"applied_digest"`
		}
		if err := json.Unmarshal(mustRead(t, filepath.Join(h.State, "state.json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Applied != pv.Generation || st.AppliedDigest != pv.Digest {
			t.Fatalf("the earlier host applied generation %d digest %s; the controller composed generation %d digest %s",
				st.Applied, st.AppliedDigest, pv.Generation, pv.Digest)
		}
		return payload
	}

	earlier := declare(prevCtl)
	today := declare("")

	var p models.DeclarationPayload
	if err := json.Unmarshal(today, &p); err != nil {
		t.Fatal(err)
	}
	if p.Schema != models.SchemaV1 || len(p.Resources) != 3 {
		t.Fatalf("today's payload: schema %d, %d resources; want schema 1 and the module's 3\n%s", p.Schema, len(p.Resources), today)
	}
	normal := func(b []byte) []byte {
		if n := len(composedRE.FindAll(b, -1)); n != 2 {
			t.Fatalf("%d composed_* fields in %s, want composed_at and composed_by once each", n, b)
		}
		return composedRE.ReplaceAll(b, []byte(`"composed_$1":""`))
	}
	if a, b := normal(earlier), normal(today); !bytes.Equal(a, b) {
		t.Fatalf("today's schema-1 payload is not the earlier commit's, composed_* aside:\nearlier: %s\ntoday:   %s", a, b)
	}
}
