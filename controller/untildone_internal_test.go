package controller

import (
	"context"
	"errors"
	"log/slog"
	"testing"
)

// TestUntilDone_TriesAgainUntilItSucceeds: the reads after a PostgreSQL
// listener's reconnect (the refused set, then the machines) are tried until
// one succeeds — a single failed read left a revocation missed in the gap
// unknown to the instance until a restart.
func TestUntilDone_TriesAgainUntilItSucceeds(t *testing.T) {
	calls := 0
	untilDone(context.Background(), slog.New(slog.DiscardHandler), "reading", func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("relation \"revocations\" does not exist")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("%d calls, want 3: two failures, then the success", calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	untilDone(ctx, slog.New(slog.DiscardHandler), "reading", func(context.Context) error {
		calls++
		cancel()
		return errors.New("down")
	})
	if calls != 1 {
		t.Fatalf("%d calls after its context ended, want 1", calls)
	}
}
