package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/store"
)

// TestSchema2_MixedFleetHeldBackThenUpgraded: no flag day for schema 2. A
// fleet of three over TLS: m1 runs a host of the previous release (built
// from an earlier commit; it decodes only schema 1), m2 and m3 today's
// (1 and 2). A module with a certificate resource and a tls check is
// given to all three. m2 and m3 apply it and each one's tls check passes
// against the other's internal name; m1 is sent only what it can take —
// held-back content, in schema 1 — is still polled, and is behind with the
// held-back reason naming the release that decodes schema 2. Today's host
// release rolled out to m1: it upgrades, advertises 1,2, its generation is
// bumped (trigger schema) and composed in full, it applies it and its
// check passes. Nobody touched a machine by hand; no machine was ever sent
// a schema its poll did not advertise.
func TestSchema2_MixedFleetHeldBackThenUpgraded(t *testing.T) {
	prev := previousHost(t)
	c := startControllerTLS(t, store.SQLite)
	c.module("web")
	c.upload("web", strings.Replace(webManifest, `"lifetime": "24s"`, `"lifetime": "1h"`, 1), webTree(t))
	c.release("mesh-host-2", "2.0.0") // today's host: decodes 1 and 2

	roots := []string{"--check-every", "1s", "--allow-root", "/opt", "--allow-root", "/etc", "--allow-root", "/var"}
	old := &hostProc{t: t, Name: "m1", State: filepath.Join(t.TempDir(), "state"), Root: filepath.Join(t.TempDir(), "root"), binary: prev, launch: true}
	if err := os.MkdirAll(old.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin, prev), "enroll", "--controller", c.URL, "--ca-pin", c.Pin,
		"--join-token", c.JoinToken(), "--name", "m1", "--state", old.State).CombinedOutput(); err != nil {
		t.Fatalf("enrolling the previous release: %v\n%s", err, out)
	}
	t.Cleanup(old.cleanup)
	old.start(append([]string{"--trial-deadline", "30s"}, roots...)...)

	p1, p2, p3 := freePort(t), freePort(t), freePort(t)
	for _, m := range []struct {
		h                          *hostProc
		name, port, peer, peerPort string
	}{{old, "m1", p1, "m2", p2}, {nil, "m2", p2, "m3", p3}, {nil, "m3", p3, "m2", p2}} {
		if m.h == nil {
			h := enroll(t, c, m.name, c.URL)
			h.launch = true // the rollout below reaches every machine of the platform
			h.start(append([]string{"--trial-deadline", "30s"}, roots...)...)
		}
		c.setVars(m.name, map[string]string{"port": m.port, "peer": m.peer, "peer_port": m.peerPort})
		c.assign(m.name, "web")
	}

	for _, name := range []string{"m2", "m3"} {
		c.waitApplied(name, 60*time.Second)
		waitFor(t, 60*time.Second, name+"'s tls check passes against its peer's internal name", func() bool {
			m := c.machine(name)
			return m.Health.State == "passing" && m.State == "current"
		})
	}

	// m1: held back, never sent schema 2, still polled.
	var m1 struct {
		machineView
		HeldBack string `json:"held_back"`
		Schema   string `json:"schema"`
	}
	waitFor(t, 60*time.Second, "m1 applied its held-back generation", func() bool {
		c.JSON(ctlReq("/api/v1/machines/m1", c.Admin), 200, &m1)
		return m1.Generation > 0 && m1.AppliedGeneration == m1.Generation && m1.HeldBack != ""
	})
	if m1.State != "behind" || m1.Schema != "1" ||
		!strings.Contains(m1.HeldBack, "held back: needs host schema 2; host 0.9.0 decodes 1; release 2.0.0 decodes 1,2") {
		t.Fatalf("m1 held back: state %q, schema %q, reason %q", m1.State, m1.Schema, m1.HeldBack)
	}
	if exists(filepath.Join(old.Root, "etc/web/key.pem")) || exists(filepath.Join(old.Root, "opt/web")) {
		t.Fatal("m1 was given part of the module it cannot take")
	}
	schemasSent := func(name string) []struct {
		Schema  int    `json:"schema"`
		Trigger string `json:"trigger"`
	} {
		var sends []struct {
			Schema  int    `json:"schema"`
			Trigger string `json:"trigger"`
		}
		var l struct{ Items json.RawMessage }
		c.JSON(ctlReq("/api/v1/machines/"+name+"/sends", c.Admin), 200, &l)
		_ = json.Unmarshal(l.Items, &sends)
		return sends
	}
	for _, s := range schemasSent("m1") {
		if s.Schema != 1 {
			t.Fatalf("m1 (decodes 1) was sent schema %d: %+v", s.Schema, schemasSent("m1"))
		}
	}

	// Today's release reaches m1 by a rollout, as any upgrade.
	c.rollout("2.0.0")
	if v := c.waitRollout("2.0.0", 120*time.Second, "done", "halted"); v.State != "done" {
		t.Fatalf("rollout: %+v\nm1's log:\n%s", v, old.log)
	}
	waitFor(t, 90*time.Second, "m1 applies the module in full and its check passes", func() bool {
		c.JSON(ctlReq("/api/v1/machines/m1", c.Admin), 200, &m1)
		return m1.HostVersion == "2.0.0" && m1.Schema == "1,2" && m1.HeldBack == "" && m1.State == "current" &&
			m1.Health.State == "passing"
	})
	sends := schemasSent("m1")
	if len(sends) == 0 || sends[0].Schema != 2 {
		t.Fatalf("m1's newest send: %+v, want schema 2", sends)
	}
	sawSchema := false
	for _, s := range sends {
		sawSchema = sawSchema || s.Trigger == "schema"
	}
	if !sawSchema {
		t.Fatalf("no generation of m1 was made by its new schemas (trigger schema): %+v", sends)
	}
	if !exists(filepath.Join(old.Root, "etc/web/key.pem")) {
		t.Fatal("m1 has no key for its certificate after the upgrade")
	}
}
