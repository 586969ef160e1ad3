package web

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

type noSeen struct{}

func (noSeen) LastSeen(int64) *time.Time { return nil }

// BenchmarkOverview: reading and rendering the overview (the live fragment
// htmx polls every 2 s) with 1,000 and 100,000 machines in varied states.
func BenchmarkOverview(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("machines-%d", n), func(b *testing.B) {
			s := overviewFleet(b, n)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				o, err := s.overviewData(ctx, "", "")
				if err != nil || len(o.Rows) != OverviewRows || o.Matching != n {
					b.Fatal(err)
				}
				var buf bytes.Buffer
				if err := OverviewPage(Page{Title: "Machines"}, o).Render(ctx, &buf); err != nil {
					b.Fatal(err)
				}
				if buf.Len() < 50_000 {
					b.Fatalf("rendered only %d bytes", buf.Len())
				}
			}
		})
	}
}

// overviewFleet is a store of n machines in varied states, and a dashboard
// server over it.
func overviewFleet(tb testing.TB, n int) *Server {
	tb.Helper()
	st := storetest.MustOpen(tb, store.SQLite)
	now := time.Now().UTC()
	ms := make([]models.Machine, n)
	outcomes := []string{"applied", "refused", "failed", "rejected", ""}
	for i := range ms {
		seen := now
		ms[i] = models.Machine{Name: fmt.Sprintf("m%04d", i), Generation: int64(5 + i%3), FinishedGen: 5, AppliedGeneration: 5,
			LastOutcome: outcomes[i%len(outcomes)], LastReason: "a reason", GenerationAt: now, Running: "{}", CreatedAt: now,
			LastSeen: &seen, HostVersion: "1.0.0"}
	}
	if err := st.DB().CreateInBatches(&ms, 200).Error; err != nil {
		tb.Fatal(err)
	}
	return NewServer(st, noSeen{}, nil, nil, "bench", slog.New(slog.DiscardHandler))
}

// TestOverview_RendersAtMostOverviewRows: a large fleet is counted whole,
// but only the first OverviewRows matching machines are rendered, with a
// line saying so; a filter narrows what is matched.
func TestOverview_RendersAtMostOverviewRows(t *testing.T) {
	s := overviewFleet(t, OverviewRows+200)
	ctx := context.Background()
	o, err := s.overviewData(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range o.Counts {
		total += c.N
	}
	if total != OverviewRows+200 || o.Total != total || o.Matching != total || len(o.Rows) != OverviewRows {
		t.Fatalf("counted %d, total %d, matching %d, rows %d; want %d counted and matched, %d rows",
			total, o.Total, o.Matching, len(o.Rows), OverviewRows+200, OverviewRows)
	}
	var buf bytes.Buffer
	if err := OverviewPage(Page{Title: "Machines"}, o).Render(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("Showing the first %d of %d matching machines", OverviewRows, total); !bytes.Contains(buf.Bytes(), []byte(want)) {
		t.Fatalf("the page does not say %q", want)
	}
	narrow, err := s.overviewData(ctx, "", "m06")
	if err != nil {
		t.Fatal(err)
	}
	if narrow.Matching != 100 || len(narrow.Rows) != 100 {
		t.Fatalf("search m06: matching %d, rows %d; want 100", narrow.Matching, len(narrow.Rows))
	}
}
