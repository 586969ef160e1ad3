package main

import (
	"strings"
	"testing"

	"mesh/client"
)

// TestWhy_FailedNamesTheGenerationThatFailed: generation 8 was rejected
// after five attempts, and three pushes later generation 11 failed; it
// said "the last attempt failed (generation 8 is the last finished)",
// naming the rejected one as if it applied and never the one that failed.
func TestWhy_FailedNamesTheGenerationThatFailed(t *testing.T) {
	m := &client.Machine{Name: "m2", State: client.MachineStateFailed, Generation: 11, AppliedGeneration: 7,
		FinishedGeneration: 8, LastOutcome: "failed", LastOutcomeGeneration: 11, LastReason: "bad.conf: /etc is a directory"}
	if w := why(m); !strings.HasPrefix(w, "generation 11 failed (it applied 7): bad.conf: /etc is a directory") {
		t.Fatalf("failed generation 11 (applied 7, 8 rejected), said: %q", w)
	}
}
