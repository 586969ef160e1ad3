package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/store"
)

// TestHost_AppliesInFullThenRemoves: a module with a tree (with inner
// symlinks), a file and a service whose port comes from ${var.port},
// assigned to two machines: both run it; sends and reports say applied.
// Unassigned: the service stops, the files go, the journal says so.
func TestHost_AppliesInFullThenRemoves(t *testing.T) {
	c := startController(t, store.SQLite)
	c.module("node-tools")
	c.upload("node-tools", runtimeManifest, runtimeTree(t))
	hosts := map[string]*hostProc{}
	ports := map[string]string{}
	for _, name := range []string{"m1", "m2"} {
		h := enroll(t, c, name, c.URL)
		h.start()
		hosts[name], ports[name] = h, freePort(t)
		c.setVars(name, map[string]string{"port": ports[name]})
		c.assign(name, "node-tools")
	}
	for name, h := range hosts {
		m := c.waitApplied(name, 30*time.Second)
		if m.State != "current" || m.HostVersion != "1.0.0" {
			t.Fatalf("%s: %+v", name, m)
		}
		if !listening(ports[name]) || copies(ports[name]) != 1 {
			t.Fatalf("%s: service on %s listening=%v copies=%d", name, ports[name], listening(ports[name]), copies(ports[name]))
		}
		conf, err := os.ReadFile(filepath.Join(h.Root, "etc/node-tools.conf"))
		if err != nil || string(conf) != "port="+ports[name]+"\nmachine="+name+"\n" {
			t.Fatalf("%s: config %q %v", name, conf, err)
		}
		if target, err := os.Readlink(filepath.Join(h.Root, "opt/node-tools/lib/current")); err != nil || target != "../bin" {
			t.Fatalf("%s: inner symlink %q %v", name, target, err)
		}
		ss := c.sends(name)
		if len(ss) == 0 || ss[0].Generation != m.Generation || ss[0].Outcome != "applied" || ss[0].Trigger != "assignment" {
			t.Fatalf("%s: latest send %+v", name, ss)
		}
		if j := h.journalText(); !strings.Contains(j, "created node-tools.runtime (node-tools): 3 file(s) at /opt/node-tools, run by node-tools.service") {
			t.Fatalf("%s journal:\n%s", name, j)
		}
	}

	// Unassigned: removed in full.
	c.put("/api/v1/machines/m1/assignments", c.machine("m1").Generation, map[string]any{"assignments": []any{}})
	c.waitApplied("m1", 30*time.Second)
	h := hosts["m1"]
	waitFor(t, 10*time.Second, "m1's service stopped", func() bool { return copies(ports["m1"]) == 0 })
	for _, p := range []string{"etc/node-tools.conf", "opt/node-tools", "opt/.node-tools.mesh"} {
		if exists(filepath.Join(h.Root, p)) {
			t.Errorf("%s still exists after unassigning", p)
		}
	}
	j := h.journal()
	last := j[len(j)-1]
	if last.Outcome != "applied" {
		t.Fatalf("last journal entry %+v", last)
	}
	removed := map[string]string{}
	for _, a := range last.Actions {
		removed[a.Resource] = a.Action
	}
	for _, id := range []string{"node-tools.runtime", "node-tools.config", "node-tools.service"} {
		if removed[id] != "removed" {
			t.Errorf("journal does not say %s was removed: %+v", id, last.Actions)
		}
	}
	// m2 was not touched.
	if !listening(ports["m2"]) || copies(ports["m2"]) != 1 {
		t.Fatal("m2's service is gone")
	}
}
