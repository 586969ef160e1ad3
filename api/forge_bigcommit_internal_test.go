package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
)

// TestPushCommits_OneHugeCommitIsBounded: a signed 5 MiB body of one
// commit naming ~600,000 distinct paths was decoded whole (every path a
// string, then a map entry each), 179 MiB; a commit is read a path at a
// time, and past maxPushPaths the push touches every module.
func TestPushCommits_OneHugeCommitIsBounded(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"commits":[{"added":[`)
	for i := 0; b.Len() < 5<<20; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"%x"`, i)
	}
	b.WriteString(`]}]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var big pushPayload
	if err := json.Unmarshal(b.Bytes(), &big); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := (after.TotalAlloc - before.TotalAlloc) >> 20
	t.Logf("one commit of 5 MiB: %d MiB allocated, %d paths kept, more %v", alloc, len(big.Commits.paths), big.Commits.more)
	if alloc > 32 || big.Commits.paths != nil || !big.Commits.more {
		t.Fatalf("one commit of 5 MiB: %d MiB allocated (the many-commits case is held to 32), %d paths kept", alloc, len(big.Commits.paths))
	}
}
