package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlan_RollbackKeepsAPersonsPinMadeAsItRuns: as
// TestPlan_RollbackKeepsAPersonsPin, but the person pins m1 to build 3
// (reason "hold") while the rollback runs: after it read m1's assignment
// (no person's pin) and before it wrote its own pin. On PostgreSQL the
// person was answered 200 and the rollback then wrote over the pin. Now
// either the person's write is refused (the rollback moved m1's
// generation first) or it lands and stays.
func TestPlan_RollbackKeepsAPersonsPinMadeAsItRuns(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, v := planOfBuild2(t, s)
		applied(t, s, "m1", 2)
		stepPlans(t, s)
		m2, _ := s.Machine(ctx, "m2")
		sentReport(t, s, m2.ID, &models.Report{Generation: m2.Generation, Outcome: models.OutcomeRefused, Reason: "escape: /x"})
		stepPlans(t, s)
		if v, _ = s.Plan(ctx, v.ID); v.State != models.PlanHalted {
			t.Fatalf("plan: %s %q", v.State, v.Reason)
		}

		// Just before the rollback writes its pin on m1's assignment, a
		// person pins m1 (If-Match the generation they read).
		var once sync.Once
		var pinErr error
		var pinned *models.Machine
		pinDone := make(chan struct{})
		if err := s.DB().Callback().Update().Before("gorm:update").Register("test:person-pins", func(db *gorm.DB) {
			up, ok := db.Statement.Dest.(map[string]any)
			if db.Statement.Table != "assignments" || !ok {
				return
			}
			if _, ok := up["pin_plan"]; !ok {
				return
			}
			once.Do(func() {
				m1, err := s.Machine(ctx, "m1")
				if err != nil {
					t.Error(err)
					close(pinDone)
					return
				}
				go func() {
					defer close(pinDone)
					b := int64(3)
					pinned, pinErr = s.SetAssignments(ctx, "user:admin", "m1", &m1.Generation,
						[]models.AssignmentView{{Module: "mod", Build: &b, Reason: "hold"}})
				}()
				// PostgreSQL: nothing the rollback holds stops the person's
				// write. SQLite: it waits for the rollback's write turn.
				select {
				case <-pinDone:
				case <-time.After(2 * time.Second):
				}
			})
		}); err != nil {
			t.Fatal(err)
		}
		v, err := s.SetPlanState(ctx, "user:olga", v.ID, "rollback")
		if err != nil {
			t.Fatal(err)
		}
		<-pinDone
		_ = s.DB().Callback().Update().Remove("test:person-pins")

		as, _, _ := s.Assignments(ctx, "m1")
		m1, _ := s.Machine(ctx, "m1")
		if pinErr != nil {
			// Refused: the rollback's pin stands, and the person was told.
			t.Logf("the person's pin was refused: %v", pinErr)
			return
		}
		if len(as) != 1 || as[0].Build == nil || *as[0].Build != 3 || as[0].Reason != "hold" {
			var b any = "none"
			if len(as) == 1 && as[0].Build != nil {
				b = *as[0].Build
			}
			t.Fatalf("the person's pin of m1 to build 3 (reason \"hold\") was answered as saved at generation %d, "+
				"but m1 is now at generation %d pinned to build %v (reason %q), composed build %d; rollback: %q",
				pinned.Generation, m1.Generation, b, as[0].Reason, composedBuild(t, s, m1), v.Reason)
		}
	})
}
