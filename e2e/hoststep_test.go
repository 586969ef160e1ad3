package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// planHostStepView is what this test reads of a plan.
type planHostStepView struct {
	ID          int64  `json:"id"`
	State       string `json:"state"`
	Reason      string `json:"reason"`
	HostRelease string `json:"host_release"`
	HostStep    *struct {
		State      string     `json:"state"`
		Plan       int64      `json:"plan"`
		FinishedAt *time.Time `json:"finished_at"`
		Machines   []struct {
			Machine string `json:"machine"`
			State   string `json:"state"`
		} `json:"machines"`
	} `json:"host_step"`
	Steps []struct {
		Machine   string     `json:"machine"`
		State     string     `json:"state"`
		StartedAt *time.Time `json:"started_at"`
	} `json:"steps"`
}

// TestSchema2_PlanRollsOutHostFirst: with real binaries, m1 runs a host of
// the previous release (decodes only schema 1). Build 2 of web adds a
// certificate (schema 2): the plan its upload makes halts at once on m1
// with the held-back reason. A plan of the same build told to roll out
// today's release (2.0.0) first upgrades m1 through its launcher's trial,
// reaches it only once that rollout is done, and ends done with m1 running
// 2.0.0, decoding 1,2 and holding its certificate's key — nobody touched
// the machine.
func TestSchema2_PlanRollsOutHostFirst(t *testing.T) {
	prev := previousHost(t)
	c := startControllerTLS(t, store.SQLite)
	c.module("web")
	c.upload("web", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/web/web.conf", "content": "1\n"}]}`, nil)
	c.release("mesh-host-2", "2.0.0")

	old := &hostProc{t: t, Name: "m1", State: filepath.Join(t.TempDir(), "state"), Root: filepath.Join(t.TempDir(), "root"), binary: prev, launch: true}
	if err := os.MkdirAll(old.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin, prev), "enroll", "--controller", c.URL, "--ca-pin", c.Pin,
		"--join-token", c.JoinToken(), "--name", "m1", "--state", old.State).CombinedOutput(); err != nil {
		t.Fatalf("enrolling the previous release: %v\n%s", err, out)
	}
	t.Cleanup(old.cleanup)
	old.start("--trial-deadline", "30s", "--allow-root", "/etc")
	c.assign("m1", "web")
	c.waitApplied("m1", 60*time.Second)

	c.upload("web", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/web/web.conf", "content": "2\n"},
	  {"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh"], "path": "/etc/web/chain.pem", "key_path": "/etc/web/key.pem"}]}`, nil)
	var auto struct{ Items []planHostStepView }
	waitFor(t, 60*time.Second, "the upload's plan halts on m1, held back", func() bool {
		c.JSON(ctlReq("/api/v1/plans", c.Admin), 200, &auto)
		return len(auto.Items) > 0 && auto.Items[0].State == "halted"
	})
	if !strings.Contains(auto.Items[0].Reason, "m1 held back: needs host schema 2; host 0.9.0 decodes 1; release 2.0.0 decodes 1,2") {
		t.Fatalf("the upload's plan: %+v", auto.Items[0])
	}

	var p planHostStepView
	c.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/plans", Token: c.Admin,
		Body: map[string]any{"module": "web", "build": 2, "host_release_first": "2.0.0"}}, 201, &p)
	if p.State != "running" || p.HostStep == nil || p.HostStep.Plan != p.ID || len(p.HostStep.Machines) != 1 || p.HostStep.Machines[0].Machine != "m1" {
		t.Fatalf("plan: %+v", p)
	}
	path := "/api/v1/plans/" + strconv.FormatInt(p.ID, 10)
	waitFor(t, 180*time.Second, "the plan done", func() bool {
		c.JSON(ctlReq(path, c.Admin), 200, &p)
		return p.State != "running"
	})
	if p.State != "done" || p.HostStep.State != "done" || p.Steps[0].StartedAt == nil || p.Steps[0].StartedAt.Before(*p.HostStep.FinishedAt) {
		t.Fatalf("plan: %+v, host step %+v, step %+v\nm1's log:\n%s", p, p.HostStep, p.Steps, old.log)
	}
	m := c.machine("m1")
	var held struct {
		HeldBack string `json:"held_back"`
		Schema   string `json:"schema"`
	}
	c.JSON(ctlReq("/api/v1/machines/m1", c.Admin), 200, &held)
	if m.HostVersion != "2.0.0" || held.Schema != "1,2" || held.HeldBack != "" || m.Running["web"].Build != 2 {
		t.Fatalf("m1: host %s, schemas %q, held back %q, running %+v", m.HostVersion, held.Schema, held.HeldBack, m.Running)
	}
	if !exists(filepath.Join(old.Root, "etc/web/key.pem")) || string(mustRead(t, filepath.Join(old.Root, "etc/web/web.conf"))) != "2\n" {
		t.Fatal("m1 does not hold build 2's files")
	}
}
