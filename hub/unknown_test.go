package hub

import (
	"context"
	"log/slog"
	"testing"

	"mesh/models"
)

// TestAdd_ABumpHeardWhileTheMachineWasUnknownIsKept: a machine enrolled on
// another instance polls here for the first time. This instance reads it
// from the store, and a change made through the other instance commits
// just after that read; its notification arrives before the hub learns
// the machine. The bump was dropped (no entry to queue it on) and the
// machine was added with the generation read before it: its first poll
// parked on a generation already past, until the next resync (30 s).
func TestAdd_ABumpHeardWhileTheMachineWasUnknownIsKept(t *testing.T) {
	for _, drained := range []bool{true, false} {
		h := New(nil, nil, "test", slog.New(slog.DiscardHandler))
		h.Bumped([]models.Bump{{MachineID: 7, Name: "m7", Generation: 5}})
		if drained {
			h.drain(context.Background())
		}
		h.Add(&models.Machine{ID: 7, Name: "m7", Generation: 4}) // read before the bump
		if v := h.View(7); v.Gen != 5 {
			t.Fatalf("drained before the machine was added %v: generation %d, want the bump's 5", drained, v.Gen)
		}
	}

	// The same through a load (the resync) rather than a first request.
	h := New(nil, nil, "test", slog.New(slog.DiscardHandler))
	h.Bumped([]models.Bump{{MachineID: 8, Name: "m8", Generation: 9}})
	h.drain(context.Background())
	h.loadHeads(nil)
	h.Add(&models.Machine{ID: 8, Name: "m8", Generation: 8})
	if v := h.View(8); v.Gen != 9 {
		t.Fatalf("generation %d after a load that did not know the machine, want 9", v.Gen)
	}
}

// TestAdd_TwoFirstRequestsKeepTheParkedPoll: two requests of a machine
// this instance did not know arrive at once; both learn it from the store
// and add it. The second replaced the first's entry, and a poll parked on
// the first was never woken by a change.
func TestAdd_TwoFirstRequestsKeepTheParkedPoll(t *testing.T) {
	h := New(nil, nil, "test", slog.New(slog.DiscardHandler))
	var woken []Parked
	h.Dispatch = func(ps []Parked) { woken = append(woken, ps...) }
	h.Add(&models.Machine{ID: 1, Name: "m1", Generation: 3})
	p := &poll{1}
	if !h.Park(p, h.View(1).Changed) {
		t.Fatal("not parked")
	}
	h.Add(&models.Machine{ID: 1, Name: "m1", Generation: 3})
	h.SetHead(1, 4, false)
	if len(woken) != 1 || woken[0] != p {
		t.Fatalf("the change woke %v, want the poll parked before the second add", woken)
	}
}
