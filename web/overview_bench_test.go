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

// BenchmarkOverview_1000Machines: reading and rendering the overview (the
// live fragment htmx polls) with 1,000 machines in varied states.
func BenchmarkOverview_1000Machines(b *testing.B) {
	st := storetest.MustOpen(b, store.SQLite)
	now := time.Now().UTC()
	ms := make([]models.Machine, 1000)
	outcomes := []string{"applied", "refused", "failed", "rejected", ""}
	for i := range ms {
		seen := now
		ms[i] = models.Machine{Name: fmt.Sprintf("m%04d", i), Generation: int64(5 + i%3), FinishedGen: 5, AppliedGeneration: 5,
			LastOutcome: outcomes[i%len(outcomes)], LastReason: "a reason", GenerationAt: now, Running: "{}", CreatedAt: now,
			LastSeen: &seen, HostVersion: "1.0.0"}
	}
	if err := st.DB().CreateInBatches(&ms, 200).Error; err != nil {
		b.Fatal(err)
	}
	s := NewServer(st, noSeen{}, nil, nil, "bench", slog.New(slog.DiscardHandler))
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		o, err := s.overviewData(ctx, "", "")
		if err != nil || len(o.Rows) != 1000 {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		if err := OverviewPage(Page{Title: "Machines"}, o).Render(ctx, &buf); err != nil {
			b.Fatal(err)
		}
		if buf.Len() < 100_000 {
			b.Fatalf("rendered only %d bytes", buf.Len())
		}
	}
}
