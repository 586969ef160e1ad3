package hub

import (
	"math"
	"runtime/debug"
	"testing"
)

// gcPercent reads GOGC as in force.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestCollector_LentForFanOutsOnly: overlapping fan-outs run under the
// larger GOGC and a memory limit near what the process holds (or the
// limit in force, when lower); when the last ends, the settings in force
// before are back — an operator's GOGC or GOMEMLIMIT is never changed.
func TestCollector_LentForFanOutsOnly(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	for _, prior := range []int64{math.MaxInt64, heldNow() + 64<<20} {
		debug.SetMemoryLimit(prior)
		end1 := gc.begin()
		end2 := gc.begin()
		if operatorChose {
			if gcPercent() != 150 || debug.SetMemoryLimit(-1) != prior {
				t.Fatalf("with GOGC or GOMEMLIMIT set by the operator a fan-out changed them: GOGC %d", gcPercent())
			}
			end1()
			end2()
			continue
		}
		if got := gcPercent(); got != fanOutGC {
			t.Fatalf("GOGC during a fan-out: %d, want %d", got, fanOutGC)
		}
		limit := debug.SetMemoryLimit(-1)
		if prior != math.MaxInt64 {
			if limit != prior {
				t.Fatalf("memory limit during a fan-out under a lower one: %d, want it kept at %d", limit, prior)
			}
		} else if held := heldNow(); limit < 2*held || limit > 2*held+2*fanOutHeadroom {
			t.Fatalf("memory limit during a fan-out: %d, held %d", limit, held)
		}
		end1()
		end1() // ending twice ends once
		if got := gcPercent(); got != fanOutGC {
			t.Fatalf("GOGC while a second fan-out runs: %d, want %d", got, fanOutGC)
		}
		end2()
		if got, lim := gcPercent(), debug.SetMemoryLimit(-1); got != 150 || lim != prior {
			t.Fatalf("after the fan-outs: GOGC %d, limit %d; want 150 and %d", got, lim, prior)
		}
	}
}
