package auth

import (
	"testing"
	"time"
)

// TestRefusals: a key is audited once a minute; the row that is due next
// says how many of it were refused, unaudited, since the last; other keys
// are their own.
func TestRefusals(t *testing.T) {
	now := time.Now()
	r := Refusals{Now: func() time.Time { return now }}
	if due, since := r.Due("a"); !due || since != 0 {
		t.Fatalf("first refusal: due %v, since %d", due, since)
	}
	for range 5 {
		if due, _ := r.Due("a"); due {
			t.Fatal("a refusal within the minute was due")
		}
	}
	if due, _ := r.Due("b"); !due {
		t.Fatal("another key's first refusal was not due")
	}
	now = now.Add(time.Minute)
	if due, since := r.Due("a"); !due || since != 5 {
		t.Fatalf("a minute on: due %v, since %d; want due with the 5 unaudited", due, since)
	}
	if got := Since(5); got != "; 5 more refused since the last record of it" || Since(0) != "" {
		t.Fatalf("Since: %q", got)
	}
}
