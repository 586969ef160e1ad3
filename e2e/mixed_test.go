package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
// held-back reason naming the release that decodes schema 2. A release
// that fails its trial on m1 (it polls as a host decoding 1,2, then
// crashes): m1's generation is bumped for the trial (trigger schema), the
// launcher puts the schema-1 host back, whose poll advertises 1 again, and
// the generation is bumped back (trigger schema) to held-back content in
// schema 1; m1's applied state stays and it goes on being polled. Today's
// host release rolled out to m1: it upgrades, advertises 1,2, its
// generation is bumped (trigger schema) and composed in full, it applies
// it and its check passes. Before that, today's host uploaded as a
// release recording schemas 1 fails its trial on m1 (its poll advertises
// 1,2) after applying the module in full; its upgraded report is refused,
// the launcher puts the schema-1 host back, and that host is sent the
// newest content it applied that it decodes. Nobody touched a machine by
// hand; no machine was ever sent a schema its poll did not advertise.
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
		vars := map[string]string{"port": m.port, "peer": m.peer, "peer_port": m.peerPort}
		if m.name == "m1" {
			vars["canary"] = "true" // the failing release below is tried on m1 alone
		}
		c.setVars(m.name, vars)
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
	type sent struct {
		ID         string `json:"id"`
		Generation int64  `json:"generation"`
		Schema     int    `json:"schema"`
		Trigger    string `json:"trigger"`
	}
	schemasSent := func(name string) []sent { // newest first
		var l struct{ Items []sent }
		c.JSON(ctlReq("/api/v1/machines/"+name+"/sends?limit=500", c.Admin), 200, &l)
		return l.Items
	}
	for _, s := range schemasSent("m1") {
		if s.Schema != 1 {
			t.Fatalf("m1 (decodes 1) was sent schema %d: %+v", s.Schema, schemasSent("m1"))
		}
	}

	// A release whose trial fails on m1, after its trial polled as a host
	// that decodes 1 and 2: pollsonce polls once advertising 1,2, keeps
	// what it was sent in trial-poll.json, and crashes before applying or
	// reporting; m1's launcher (the previous release's) puts known-good
	// back, the schema-1 host. The rollout halts on m1, the canary.
	managedBefore := managed(t, old.State)
	c.release("pollsonce", "1.9.0")
	c.rollout("1.9.0")
	if v := c.waitRollout("1.9.0", 90*time.Second, "halted", "done"); v.State != "halted" ||
		!strings.Contains(v.Reason, "machine m1 rolled back") || !strings.Contains(v.Reason, "exited before completing a reconcile") {
		t.Fatalf("rollout of the failing release: %+v\nm1's log:\n%s", v, old.log)
	} else {
		for _, m := range v.Machines {
			if m.Machine != "m1" && (m.State != "withdrawn" || !strings.Contains(m.Reason, "never reached")) { // never tried: the rollout halted first
				t.Fatalf("%s was tried with the failing release: %+v", m.Machine, v.Machines)
			}
		}
	}
	c.waitReport("m1", "rolled_back", "rolled back from 1.9.0 to 0.9.0")
	var trial struct {
		Send       string `json:"send"`
		Generation int64  `json:"generation"`
		Schema     int    `json:"schema"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(old.State, "trial-poll.json")), &trial); err != nil {
		t.Fatal(err)
	}
	// Back on the schema-1 host: its poll advertises 1, its generation is
	// bumped back and composed from held-back content; it applies it.
	waitFor(t, 60*time.Second, "m1 back on the schema-1 host applies held-back content newer than the trial's", func() bool {
		c.JSON(ctlReq("/api/v1/machines/m1", c.Admin), 200, &m1)
		return m1.HostVersion == "0.9.0" && m1.Schema == "1" && m1.Generation > trial.Generation &&
			m1.AppliedGeneration == m1.Generation && m1.FinishedGen == m1.Generation &&
			strings.Contains(m1.HeldBack, "release 2.0.0 decodes")
	})
	if m1.State != "behind" || m1.HeldBack != "held back: needs host schema 2; host 0.9.0 decodes 1; release 2.0.0 decodes 1,2" {
		t.Fatalf("m1 after the rollback: state %q, reason %q", m1.State, m1.HeldBack)
	}
	// What was sent: the trial (its poll advertised 1,2) a generation made
	// for its schemas, in 2; every send to the schema-1 host, before the
	// trial and after it, in 1 — among them the generation its first poll
	// after the rollback made (trigger schema).
	sends, trialAt := schemasSent("m1"), -1
	for i, s := range sends {
		if s.ID == trial.Send {
			trialAt = i
		}
	}
	if trialAt < 0 || sends[trialAt].Schema != 2 || sends[trialAt].Trigger != "schema" || trial.Schema != 2 {
		t.Fatalf("the trial's send %+v is not among m1's as a schema-2 generation made by its schemas: %+v", trial, sends)
	}
	bumpedBack := false
	for i, s := range sends {
		if i == trialAt {
			continue
		}
		if s.Schema != 1 {
			t.Fatalf("m1's schema-1 host was sent schema %d (send %s): %+v", s.Schema, s.ID, sends)
		}
		bumpedBack = bumpedBack || (i < trialAt && s.Trigger == "schema")
	}
	if !bumpedBack {
		t.Fatalf("no generation after the trial's was made by m1's schemas going back to 1: %+v", sends)
	}
	var audit struct {
		Items []struct{ Action, Target, Detail string }
	}
	c.JSON(ctlReq("/api/v1/audit?limit=200", c.Admin), 200, &audit)
	said := map[string]bool{}
	for _, e := range audit.Items {
		if e.Action == "schema" && e.Target == "machine/m1" {
			said[e.Detail] = true
		}
	}
	if !said["host 1.9.0 decodes schemas 1,2 (was 1)"] || !said["host 0.9.0 decodes schemas 1 (was 1,2)"] {
		t.Fatalf("m1's schema changes in the audit log: %v", said)
	}
	// Its applied state stayed: the same resources, nothing of the module.
	if got := managed(t, old.State); !slices.Equal(got, managedBefore) {
		t.Fatalf("m1 manages %v after the failed trial, %v before", got, managedBefore)
	}
	if exists(filepath.Join(old.Root, "etc/web/key.pem")) || exists(filepath.Join(old.Root, "opt/web")) {
		t.Fatal("m1 was given part of the module by the failed trial")
	}

	// Today's host uploaded as 5.0.0 recording schemas 1: its trial on m1
	// polls advertising 1,2, so the controller fails it (the rollout
	// halts with the schema reason, m1's generation is bumped) and
	// refuses its upgraded report. The trial, its poll having advertised
	// 1,2, is sent the module in full and applies it; with no reconcile
	// marker, m1's launcher puts the schema-1 host back at the trial
	// deadline. That host is sent, whole, the newest content it applied
	// that it decodes — the held-back content it ran before the trial —
	// and applies it: m1 never stops receiving declarations.
	c.releaseSchemas("mesh-host-5", "5.0.0", "1")
	c.rollout("5.0.0")
	if v := c.waitRollout("5.0.0", 90*time.Second, "halted", "done"); v.State != "halted" ||
		v.Reason != "machine m1 failed: its trial poll advertised schemas 1,2; release 5.0.0 records 1" {
		t.Fatalf("rollout of the release recording the wrong schemas: %+v\nm1's log:\n%s", v, old.log)
	}
	waitFor(t, 90*time.Second, "m1 back on the schema-1 host applies the newest content it decodes", func() bool {
		c.JSON(ctlReq("/api/v1/machines/m1", c.Admin), 200, &m1)
		return m1.HostVersion == "0.9.0" && m1.Schema == "1" && m1.AppliedGeneration == m1.Generation &&
			m1.FinishedGen == m1.Generation && strings.Contains(m1.HeldBack, "the newest it applied that its host decodes")
	})
	if m1.State != "behind" || !strings.HasPrefix(m1.HeldBack, "held back: needs host schema 2; host 0.9.0 decodes 1; release 2.0.0 decodes 1,2; sent the content of generation ") {
		t.Fatalf("m1 after the rollback past applied content: state %q, reason %q", m1.State, m1.HeldBack)
	}
	c.waitReport("m1", "rolled_back", "rolled back from 5.0.0 to 0.9.0")
	if j := old.journalText(); !strings.Contains(j, "report refused by the controller (409): upgraded report refused: the trial of host release 5.0.0 on machine m1 failed") {
		t.Fatalf("m1's journal has no refused upgraded report:\n%s", j)
	}
	if got := managed(t, old.State); !slices.Equal(got, managedBefore) {
		t.Fatalf("m1 manages %v back on the schema-1 host, %v before the trial", got, managedBefore)
	}
	for _, s := range schemasSent("m1")[:1] {
		if s.Schema != 1 {
			t.Fatalf("m1's schema-1 host was sent schema %d: %+v", s.Schema, s)
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
	sends = schemasSent("m1")
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

// managed is the ids of the resources a host's state says it manages,
// sorted.
func managed(t *testing.T, state string) []string {
	t.Helper()
	var st struct {
		Resources map[string]json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(state, "state.json")), &st); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(st.Resources))
	for id := range st.Resources {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
