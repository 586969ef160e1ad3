package hub

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A fan-out allocates ~10 KiB a machine — the snapshot's rows, the
// payloads and envelopes, the store driver's copies of what it inserts —
// nearly all of it stored or sent and garbage by the end of its chunk.
// Under Go's default (a collection each time the heap doubles over what
// the last one left) the collector runs several times a fan-out, a tenth
// and more of its CPU, while every host waits. For the fan-out only, the
// collector lets the heap grow to five times what was live
// (GOGC=400), bounded by a memory limit: twice what the process holds
// when the fan-out begins plus fanOutHeadroom — never below where Go's
// default would collect (twice the live heap), so a fan-out whose live
// heap grows is not held to a limit the default would not have set, and
// the collector does not run without pause near it. After the fan-out
// the settings are back as they were, so a controller at rest (its
// hosts' polls waiting) holds what it held. An operator who set GOGC or
// GOMEMLIMIT has chosen: nothing is changed.

// fanOutGC is the GOGC a fan-out runs under.
const fanOutGC = 400

// fanOutHeadroom is what a fan-out may hold beyond twice what the
// process held when it began.
const fanOutHeadroom = 256 << 20

// collector lends fan-outs the larger GOGC; fan-outs may overlap, the
// first to begin sets it and the last to end restores it.
type collector struct {
	mu        sync.Mutex
	fanOuts   int
	gcPercent int
	limit     int64
}

var gc collector

// operatorChose reports whether the process's environment sets the
// collector: then it is the operator's to set.
var operatorChose = os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != ""

// begin raises GOGC for a fan-out; end (its result) puts it back.
func (c *collector) begin() (end func()) {
	if operatorChose {
		return func() {}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fanOuts == 0 {
		c.limit = debug.SetMemoryLimit(min(c.limit0(), fanOutLimit(heldNow())))
		c.gcPercent = debug.SetGCPercent(fanOutGC)
	}
	c.fanOuts++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.fanOuts--
			if c.fanOuts == 0 {
				debug.SetGCPercent(c.gcPercent)
				debug.SetMemoryLimit(c.limit)
			}
		})
	}
}

// fanOutLimit is the memory limit of a fan-out that begins with the
// process holding held bytes.
func fanOutLimit(held int64) int64 {
	if held > (math.MaxInt64-fanOutHeadroom)/2 {
		return math.MaxInt64
	}
	return 2*held + fanOutHeadroom
}

// limit0 is the memory limit in force (math.MaxInt64: none).
func (c *collector) limit0() int64 {
	return debug.SetMemoryLimit(-1)
}

// heldNow is the memory the runtime holds from the system and has not
// given back: what the memory limit counts.
func heldNow() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return math.MaxInt64 // unknown: no limit (fanOutLimit)
	}
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}
