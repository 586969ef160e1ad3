package store_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestRetention_PartitionsMadeWhileHostsReport: a new epoch's partitions
// were created while hosts reported, and the common report (one
// statement, no transaction) deadlocked with them (a partition locks its
// parent, then machines; a report, machines, then reports) and was
// answered with the engine's error. Partitions lock machines first now,
// and a deadlock's victim goes the transaction's way.
func TestRetention_PartitionsMadeWhileHostsReport(t *testing.T) {
	s := storetest.MustOpen(t, store.Postgres)
	ctx := context.Background()
	w := &retentionWorld{t: t, s: s, clock: time.Now().UTC(), sg: newSigner()}
	var sends []models.Send
	for _, n := range []string{"a", "b", "c", "d"} {
		sends = append(sends, w.deliver(fixture(t, s, n)))
	}
	var reports, deadlocks, other atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, snd := range sends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := &models.Report{Send: snd.ID, Generation: snd.Generation, Digest: snd.Digest, Outcome: models.OutcomeChecked}
				_, err := s.InsertReport(ctx, snd.MachineID, r, []byte(`{}`))
				switch {
				case err == nil:
					reports.Add(1)
				case strings.Contains(err.Error(), "40P01"):
					if deadlocks.Add(1) == 1 {
						t.Logf("report refused: %v", err)
					}
				default:
					if other.Add(1) == 1 {
						t.Logf("report: %v", err)
					}
				}
			}
		}()
	}
	runs, failed := 0, 0
	for runs < 6 {
		// Keep an hour (nothing is dropped); a new epoch, and so new
		// partitions, at every run: what happens once every keep/8.
		if _, err := s.RunRetention(ctx, store.Retention{Keep: time.Hour, Span: time.Nanosecond}); err != nil {
			failed++
		}
		runs++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d retention runs (%d failed), %d reports stored, %d refused by a deadlock, %d other errors", runs, failed, reports.Load(), deadlocks.Load(), other.Load())
	if deadlocks.Load() > 0 || other.Load() > 0 || failed > 0 || reports.Load() == 0 {
		t.Errorf("reports were refused while partitions were created, or retention failed")
	}
}
