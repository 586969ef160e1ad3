package models

import (
	"strings"
	"testing"
	"time"
)

// TestSayState_OfflineAndBehindSaysBoth: a machine whose host is offline
// and four generations behind said only "offline, last seen 3m ago":
// nothing of it being behind, or since when.
func TestSayState_OfflineAndBehindSaysBoth(t *testing.T) {
	now := time.Now()
	seen := now.Add(-3 * time.Minute)
	m := &Machine{Name: "m5", Generation: 9, FinishedGen: 5, AppliedGeneration: 5,
		GenerationAt: now.Add(-2 * time.Minute), GenerationTrigger: "plan", CreatedAt: now.Add(-time.Hour)}
	w := SayState(StateOffline, m, &seen, nil, now)
	if w.Badge != "offline, behind by 4 generation(s)" || !strings.Contains(w.Since, "last seen") || !strings.Contains(w.Since, "generation 9 made 2m ago (plan), 5 the last it finished") {
		t.Fatalf("offline and 4 generations behind: %q / %q", w.Badge, w.Since)
	}
	m.FinishedGen = 9
	if w := SayState(StateOffline, m, &seen, nil, now); w.Badge != "offline" {
		t.Fatalf("offline, not behind: %q", w.Badge)
	}
}
