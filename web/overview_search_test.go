package web

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestOverview_TheSearchIsLoweredOnce: the overview's search is lowered
// once, not once for every machine of the fleet: a long one of capitals
// on 5,000 machines was 2.5 GB allocated and seconds of CPU for one
// request (the page refuses one longer than a name, too).
func TestOverview_TheSearchIsLoweredOnce(t *testing.T) {
	s := overviewFleet(t, 5000)
	ctx := context.Background()
	measure := func(q string) (time.Duration, uint64) {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		start := time.Now()
		if _, err := s.overviewData(ctx, "", q); err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		runtime.ReadMemStats(&b)
		return el, (b.TotalAlloc - a.TotalAlloc) >> 20
	}
	base, baseAlloc := measure("m00")
	el, alloc := measure(strings.Repeat("A", 512<<10))
	t.Logf("5,000 machines: q=m00 %v, %d MiB; q of 512 KiB of capitals %v, %d MiB", base, baseAlloc, el, alloc)
	if alloc > 64 {
		t.Fatalf("one overview request with a long q took %v and allocated %d MiB (a short one: %v)", el, alloc, base)
	}
}
