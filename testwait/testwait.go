// Package testwait is the one way tests wait for a state: a condition
// polled until a deadline, never a sleep that hopes the state has come.
// Only tests import it.
package testwait

import (
	"testing"
	"time"
)

// For polls cond until it holds, and fails tb with what when d passes
// first.
func For(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Until(d, cond) {
		tb.Fatalf("%s: not within %v", what, d)
	}
}

// Until polls cond until it holds (true) or d passes (false): for a caller
// that says more than For can when the state never comes.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := min(50*time.Millisecond, max(d/100, 2*time.Millisecond))
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
	return true
}
