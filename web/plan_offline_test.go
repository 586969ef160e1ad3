package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
)

// TestPlanPage_AStepWaitingOnAnOfflineHostSaysOffline: a plan's step
// reaches a machine whose host is offline. For the tier's whole deadline
// (10 minutes by default) the plan's page said "generation N made for it,
// awaiting its host's report", while the machine list said offline and
// nothing was sent; it says the host is offline, since when, and the API
// says when (host_offline_since), as meshctl plans show does.
func TestPlanPage_AStepWaitingOnAnOfflineHostSaysOffline(t *testing.T) {
	e, _, vw := fixture(t)
	ctx := context.Background()
	m, _ := e.Ctl.Store.Machine(ctx, "m1")
	g := m.Generation
	if _, err := e.Ctl.Store.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{{Module: "node-tools"}}); err != nil {
		t.Fatal(err)
	}
	report(t, e, "m1", 1)
	if resp, b := e.Upload(e.Admin, "node-tools", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": "y\n"}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %s", b)
	}
	ps, err := e.Ctl.Store.Plans(ctx, 1, 0)
	if err != nil || len(ps) != 1 {
		t.Fatalf("no plan: %v %v", ps, err)
	}
	// m1's host went silent five minutes ago: offline.
	if err := e.Ctl.Store.DB().Exec("UPDATE machines SET last_seen = ? WHERE name = 'm1'", time.Now().Add(-5*time.Minute).UTC()).Error; err != nil {
		t.Fatal(err)
	}
	if err := e.Ctl.Store.StepPlans(ctx); err != nil {
		t.Fatal(err)
	}
	if m, _ = e.Ctl.Store.Machine(ctx, "m1"); e.Ctl.Store.Rules.State(m, m.LastSeen, time.Now()) != models.StateOffline {
		t.Fatal("could not make m1 offline in this fixture")
	}
	_, body := vw.get(fmt.Sprintf("/plans/%d", ps[0].ID))
	i := strings.Index(body, `data-machine="m1"`)
	if i < 0 {
		i = strings.Index(body, ">m1<")
	}
	row := body[max(i, 0):min(len(body), max(i, 0)+600)]
	if !strings.Contains(row, "its host is offline, last heard from") {
		t.Fatalf("the step of an offline machine says: %s", row)
	}
	var v struct {
		Steps []struct {
			Machine          string
			HostOfflineSince *time.Time `json:"host_offline_since"`
		}
	}
	e.JSON(ctltest.Request{Method: "GET", Path: fmt.Sprintf("/api/v1/plans/%d", ps[0].ID), Token: e.Admin}, 200, &v)
	if len(v.Steps) != 1 || v.Steps[0].HostOfflineSince == nil || time.Since(*v.Steps[0].HostOfflineSince) < 4*time.Minute {
		t.Fatalf("the API's step: %+v", v.Steps)
	}
	var l struct {
		Items []struct {
			Steps []struct {
				HostOfflineSince *time.Time `json:"host_offline_since"`
			}
		}
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: e.Admin}, 200, &l)
	if len(l.Items) != 1 || len(l.Items[0].Steps) != 1 || l.Items[0].Steps[0].HostOfflineSince == nil {
		t.Fatalf("the API's list of plans: %+v", l.Items)
	}
}
