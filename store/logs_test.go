package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestServiceLogs_LatestShipmentPerResource: the lines a report carries
// are kept per (machine, resource), the next shipment overwrites them,
// with the time the controller received them, the send and generation;
// another machine's are its own; an untied report's lines move nothing;
// a deleted machine's lines go with it.
func TestServiceLogs_LatestShipmentPerResource(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1, m2 := fixture(t, s, "m1"), fixture(t, s, "m2")
		lines := func(n int, word string) []string {
			ls := make([]string, n)
			for i := range ls {
				ls[i] = word
			}
			return ls
		}

		r := &models.Report{Generation: m1.Generation, Outcome: models.OutcomeApplied, Logs: []models.ServiceLog{
			{Resource: "mod.service", Why: models.LogUnhealthy, Lines: []string{"starting", "bind: address already in use"}},
			{Resource: "mod.worker", Why: models.LogRestarted, Lines: lines(models.MaxLogLines, "crash\tloop é"), Truncated: true},
		}}
		sentReport(t, s, m1.ID, r)
		got, err := s.ServiceLogs(ctx, m1.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Resource != "mod.service" || got[1].Resource != "mod.worker" {
			t.Fatalf("m1's logs: %+v", got)
		}
		v := got[0].View(0)
		if v.Why != models.LogUnhealthy || strings.Join(v.Lines, "|") != "starting|bind: address already in use" ||
			v.Send != r.Send || v.Generation != m1.Generation || v.ReportID == 0 || v.ShippedAt.IsZero() || v.Truncated {
			t.Fatalf("mod.service: %+v", v)
		}
		if w := got[1].View(3); len(w.Lines) != 3 || w.Lines[2] != "crash\tloop é" || !w.Truncated {
			t.Fatalf("mod.worker, tail 3: %+v", w)
		}
		first := v.ShippedAt

		// The next shipment of one resource overwrites it, and only it.
		r2 := &models.Report{Generation: m1.Generation, Outcome: models.OutcomeChecked, Logs: []models.ServiceLog{
			{Resource: "mod.service", Why: models.LogRestarted, Lines: []string{"again"}}}}
		sentReport(t, s, m1.ID, r2)
		got, _ = s.ServiceLogs(ctx, m1.ID, "mod.service")
		if len(got) != 1 || got[0].Why != models.LogRestarted || got[0].Lines != "again" || got[0].Send != r2.Send || got[0].ShippedAt.Before(first) {
			t.Fatalf("after the second shipment: %+v", got)
		}
		if got, _ = s.ServiceLogs(ctx, m1.ID, "mod.worker"); len(got) != 1 || got[0].Why != models.LogRestarted {
			t.Fatalf("mod.worker changed: %+v", got)
		}

		// Another machine, and a report naming no send.
		if got, _ = s.ServiceLogs(ctx, m2.ID, ""); len(got) != 0 {
			t.Fatalf("m2 has m1's logs: %+v", got)
		}
		untied := &models.Report{Generation: 0, Outcome: models.OutcomeRefused, Logs: []models.ServiceLog{
			{Resource: "mod.service", Why: models.LogFailed, Lines: []string{"forged"}}}}
		if _, err := s.InsertReport(ctx, m2.ID, untied, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if got, _ = s.ServiceLogs(ctx, m2.ID, ""); len(got) != 0 {
			t.Fatalf("an untied report's lines were kept: %+v", got)
		}
		if got, _ = s.ServiceLogs(ctx, m1.ID, "mod.nothing"); len(got) != 0 {
			t.Fatalf("a resource never shipped: %+v", got)
		}

		if err := s.DeleteMachine(ctx, "test", "m1"); err != nil {
			t.Fatal(err)
		}
		if got, _ = s.ServiceLogs(ctx, m1.ID, ""); len(got) != 0 {
			t.Fatalf("a deleted machine's logs stayed: %+v", got)
		}
	})
}

// TestServiceLogs_ResourcesKeptBounded: a host shipping lines under ever
// new resource names kept a row for each, for good (its page and logs
// read them all): the latest MaxLogResources of a machine are kept.
func TestServiceLogs_ResourcesKeptBounded(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		for i := range models.MaxLogResources/models.MaxLogServices + 2 {
			var ls []models.ServiceLog
			for j := range models.MaxLogServices {
				ls = append(ls, models.ServiceLog{Resource: fmt.Sprintf("svc%03d.service", i*models.MaxLogServices+j), Why: models.LogFailed, Lines: []string{"x"}})
			}
			sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: models.OutcomeChecked, Logs: ls})
		}
		got, err := s.ServiceLogs(ctx, m.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != models.MaxLogResources {
			t.Fatalf("%d resources kept, want %d", len(got), models.MaxLogResources)
		}
		last := fmt.Sprintf("svc%03d.service", (models.MaxLogResources/models.MaxLogServices+2)*models.MaxLogServices-1)
		if kept, _ := s.ServiceLogs(ctx, m.ID, last); len(kept) != 1 {
			t.Fatalf("the latest shipment's %s was not kept", last)
		}
		if gone, _ := s.ServiceLogs(ctx, m.ID, "svc000.service"); len(gone) != 0 {
			t.Fatal("the oldest shipment's svc000.service was kept")
		}
	})
}
