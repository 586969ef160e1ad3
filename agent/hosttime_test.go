package agent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"mesh/models"
)

// TestReport_SaysTheHostsClockAsItLeaves: the times a report carries are
// the host's clock's; the controller reads them against that clock as the
// report left (X-Mesh-Host-Time), set at each attempt, not when the report
// was made (it may wait in the outbox).
func TestReport_SaysTheHostsClockAsItLeaves(t *testing.T) {
	srv := newReportServer(t)
	a := agentReportingTo(t, srv)
	made := time.Now().Add(-time.Hour) // made an hour ago, kept in the outbox
	body, _ := json.Marshal(models.Report{Generation: 1, Outcome: models.OutcomeChecked, FinishedAt: &made})
	before := time.Now()
	if err := a.client.postReport(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.got) != 1 || srv.got[0].HostNow == nil {
		t.Fatalf("the report did not say the host's clock: %+v", srv.got)
	}
	if at := *srv.got[0].HostNow; at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("%s says %s; the report left at %s", models.HostTimeHeader, at, before)
	}
}
