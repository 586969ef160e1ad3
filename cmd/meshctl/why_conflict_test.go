package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/client"
)

// TestWhy_ConflictSaysWhenItWasFound: the conflict's time (conflict_at,
// migration 0042) and when its host was last seen are said by the
// dashboard, "every place a conflict is shown" (DESIGN: state words say
// when what they claim was checked). meshctl machines ls and get, an
// admin's first look, said only "host finished generation N, the store
// holds M: an admin must resolve it" — a conflict its host repeats every
// minute read the same as one said once, two days ago, by a host gone
// since.
func TestWhy_ConflictSaysWhenItWasFound(t *testing.T) {
	found := time.Now().Add(-50 * time.Hour)
	seen := found.Add(time.Minute)
	m := &client.Machine{Name: "m1", State: client.MachineStateConflict, Generation: 1, ConflictHostGeneration: 99,
		ConflictAt: &found, LastSeen: &seen}
	w := why(m)
	when := regexp.MustCompile(`\d+[smhd] ago|\d{4}-\d\d-\d\d`)
	if !when.MatchString(w) || !strings.Contains(w, "found") {
		t.Fatalf("meshctl says of a conflict found %s and its host last seen %s: %q", found.Format(time.RFC3339), seen.Format(time.RFC3339), w)
	}
}
