package web

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// bumpDuringRead makes the next read of whole machines by id (the rows a
// page shows, after it judged the fleet's states) first commit a new
// generation for name, from another connection: the moment a machine
// changes between the two reads.
func bumpDuringRead(t *testing.T, s *store.Store, name string) *atomic.Bool {
	t.Helper()
	var armed atomic.Bool
	hook := "test:bump-during-read"
	if err := s.DB().Callback().Query().Before("gorm:query").Register(hook, func(db *gorm.DB) {
		if db.Statement.Table != "machines" || !strings.Contains(fmt.Sprint(db.Statement.Clauses["WHERE"].Expression), "id IN") {
			return
		}
		if !armed.CompareAndSwap(true, false) {
			return
		}
		if err := s.DB().Session(&gorm.Session{NewDB: true}).Exec(`UPDATE machines SET generation = generation + 1 WHERE name = ?`, name).Error; err != nil {
			t.Errorf("bumping %s: %v", name, err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.DB().Callback().Query().Remove(hook) })
	return &armed
}

// A machine that changed between the overview's count of the fleet and
// its read of the rows was counted under one state and shown under
// another: under the filter current, a row saying behind, the counts
// saying one machine current.
func TestOverview_CountsAndRowsAreOfOneRead(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, st *store.Store) {
		now := time.Now().UTC()
		m := models.Machine{Name: "m1", Generation: 5, FinishedGen: 5, AppliedGeneration: 5, LastOutcome: models.OutcomeApplied,
			LastOutcomeGen: 5, GenerationAt: now, Running: "{}", CreatedAt: now, LastSeen: &now, HostVersion: "1.0.0"}
		if err := st.DB().Create(&m).Error; err != nil {
			t.Fatal(err)
		}
		s := NewServer(st, noSeen{}, nil, nil, "test", slog.New(slog.DiscardHandler))
		armed := bumpDuringRead(t, st, "m1")
		armed.Store(true)
		o, err := s.overviewData(context.Background(), models.StateCurrent, "")
		if err != nil {
			t.Fatal(err)
		}
		if armed.Load() {
			t.Fatal("the rows were not read by id: the test no longer changes the machine between the reads")
		}
		if len(o.Rows) != 1 || o.Rows[0].State != models.StateCurrent {
			t.Fatalf("the overview filtered to current, counts %+v, shows rows %+v", o.Counts, o.Rows)
		}
	})
}
