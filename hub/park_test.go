package hub

import (
	"log/slog"
	"testing"

	"mesh/models"
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
