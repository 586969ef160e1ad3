package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

type planView struct {
	ID     int64  `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	Tier   int64  `json:"tier"`
	Steps  []struct {
		Machine    string `json:"machine"`
		State      string `json:"state"`
		Generation int64  `json:"generation"`
	} `json:"steps"`
}

// TestPlan_SurvivesControllerKill: a plan rolls build 2 to three real
// hosts tier by tier; the controller is SIGKILLed in the middle and
// started again: the plan continues where it was, no step runs twice and
// none is skipped, and build 2 ends current.
func TestPlan_SurvivesControllerKill(t *testing.T) {
	c := startController(t, store.SQLite)
	c.module("conf")
	manifest := func(v string) string {
		return `{"resources": [{"name": "f", "kind": "file", "path": "/etc/conf", "content": "build ` + v + `\n"}]}`
	}
	c.upload("conf", manifest("1"), nil)
	var hosts []*hostProc
	for _, n := range []string{"m1", "m2", "m3"} {
		h := enroll(t, c, n, c.URL)
		h.start()
		hosts = append(hosts, h)
		c.assign(n, "conf")
		c.waitApplied(n, 30*time.Second)
	}
	c.upload("conf", manifest("2"), nil) // a finished build makes a plan
	var plans struct{ Items []planView }
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: c.Admin}, 200, &plans)
	if len(plans.Items) != 1 {
		t.Fatalf("%d plans after build 2", len(plans.Items))
	}
	p := plans.Items[0]
	if p.State != "running" || p.Steps[0].State != "sent" {
		t.Fatalf("plan %+v", p)
	}
	// The canary applies; kill the controller before it can move on.
	waitFor(t, 30*time.Second, "the canary applied build 2", func() bool {
		b, _ := os.ReadFile(filepath.Join(hosts[0].Root, "etc/conf"))
		return string(b) == "build 2\n"
	})
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
	c.cmd = nil
	c.start()
	waitFor(t, 60*time.Second, "the plan done", func() bool {
		c.JSON(ctltest.Request{Method: "GET", Path: fmt.Sprintf("/api/v1/plans/%d", p.ID), Token: c.Admin}, 200, &p)
		return p.State == "done"
	})
	for i, h := range hosts {
		b, _ := os.ReadFile(filepath.Join(h.Root, "etc/conf"))
		if string(b) != "build 2\n" {
			t.Fatalf("%s has %q", h.Name, b)
		}
		// One generation per step: the plan reached each machine once.
		n := 0
		for _, s := range c.sends(h.Name) {
			if s.Trigger == "plan" {
				n++
				if s.Generation != p.Steps[i].Generation {
					t.Fatalf("%s: a plan send of generation %d, the step made %d", h.Name, s.Generation, p.Steps[i].Generation)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%s got %d plan sends, want exactly 1", h.Name, n)
		}
	}
	var mod struct {
		CurrentBuild int64 `json:"current_build"`
	}
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules/conf", Token: c.Admin}, 200, &mod)
	if mod.CurrentBuild != 2 {
		t.Fatalf("current build %d", mod.CurrentBuild)
	}
}
