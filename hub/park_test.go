package hub

import (
	"log/slog"
	"testing"

	"mesh/models"
	"mesh/store"
)

type poll struct{ id int64 }

func (p *poll) Machine() int64 { return p.id }

// TestPark_ChangedSinceItLooked: a poll decides to wait from a view of its
// machine, then parks. A change in between woke the polls parked at that
// moment, not this one: it is not parked (its caller answers it at once)
// rather than left waiting out its whole wait for a change that already
// happened. With nothing in between it parks, and the next change wakes it.
func TestPark_ChangedSinceItLooked(t *testing.T) {
	h := New(nil, nil, "test", slog.New(slog.DiscardHandler))
	var woken []Parked
	h.Dispatch = func(ps []Parked) { woken = append(woken, ps...) }
	h.Add(&models.Machine{ID: 1, Name: "m1", Generation: 3})

	v := h.View(1)
	h.SetHead(1, 4, false) // the change lands between the look and the park
	if h.Park(&poll{1}, v.Changed) {
		t.Fatal("parked a poll whose machine changed since it looked")
	}

	p := &poll{1}
	if !h.Park(p, h.View(1).Changed) {
		t.Fatal("a poll whose machine did not change was not parked")
	}
	h.SetHead(1, 5, false)
	if len(woken) != 1 || woken[0] != p {
		t.Fatalf("the change woke %v, want the parked poll", woken)
	}

	v = h.View(1)
	h.Remove("m1")
	if h.Park(&poll{1}, v.Changed) {
		t.Fatal("parked a poll of a removed machine")
	}
}

// TestLoad_StaleReadKeepsNewerGeneration: a resync reads every machine's
// head before it takes the hub's lock. A bump composed and woken in
// between is newer than that read: the machine stays at the newer
// generation, not pending, so its polls are answered rather than held
// for a wake that already came (until the next resync, 30 s).
func TestLoad_StaleReadKeepsNewerGeneration(t *testing.T) {
	h := New(nil, nil, "test", slog.New(slog.DiscardHandler))
	h.Dispatch = func([]Parked) {}
	h.Add(&models.Machine{ID: 1, Name: "m1", Generation: 4})
	h.Bumped([]models.Bump{{MachineID: 1, Name: "m1", Generation: 5}})
	h.SetHead(1, 5, false) // composed and woken
	h.loadHeads([]store.MachineHead{{ID: 1, Name: "m1", Generation: 4, Conflict: true}})
	v := h.View(1)
	if v.Gen != 5 || v.Pending || v.Conflict {
		t.Fatalf("after a read older than the hub: generation %d, pending %v, conflict %v; want 5, false, false", v.Gen, v.Pending, v.Conflict)
	}
	h.loadHeads([]store.MachineHead{{ID: 1, Name: "m1", Generation: 6, Conflict: true}})
	if v := h.View(1); v.Gen != 6 || !v.Conflict {
		t.Fatalf("after a newer read: generation %d, conflict %v; want 6, true", v.Gen, v.Conflict)
	}
}
