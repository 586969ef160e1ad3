package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// TestPushCommits_ReadACommitAtATime: a push's commits are read a commit
// at a time, their paths kept once each. A signed body of 5 MiB of empty
// commits ({},{},… 1.7 million of them) was decoded whole into a slice of
// them: 400 MiB of heap a delivery. Past maxPushCommits the push is taken
// as touching every module (no paths), as one naming none is.
func TestPushCommits_ReadACommitAtATime(t *testing.T) {
	var p pushPayload
	if err := json.Unmarshal([]byte(`{"commits":[{"added":["a/1","b/2"],"modified":["a/1"]},{"removed":["c/3"]},{}]}`), &p); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Commits.paths, []string{"a/1", "b/2", "c/3"}) || p.Commits.more {
		t.Fatalf("paths %q, more %v", p.Commits.paths, p.Commits.more)
	}
	for _, bad := range []string{`{"commits":{}}`, `{"commits":[1]}`, `{"commits":[{"added":"x"}]}`} {
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("%s: taken", bad)
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"commits":[`)
	for b.Len() < 5<<20 {
		b.WriteString(`{"added":["x"]},`)
	}
	b.WriteString(`{}]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var big pushPayload
	if err := json.Unmarshal(b.Bytes(), &big); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := (after.TotalAlloc - before.TotalAlloc) >> 20
	t.Logf("5 MiB of commits: %d MiB allocated, %d paths, more %v", alloc, len(big.Commits.paths), big.Commits.more)
	if alloc > 32 || big.Commits.paths != nil || !big.Commits.more {
		t.Fatalf("5 MiB of commits: %d MiB allocated, paths %d, more %v", alloc, len(big.Commits.paths), big.Commits.more)
	}
	var n bytes.Buffer
	n.WriteString(`{"commits":[`)
	for i := range maxPushCommits {
		if i > 0 {
			n.WriteString(",")
		}
		fmt.Fprintf(&n, `{"modified":["f%d"]}`, i%10)
	}
	n.WriteString(`]}`)
	var full pushPayload
	if err := json.Unmarshal(n.Bytes(), &full); err != nil || len(full.Commits.paths) != 10 || full.Commits.more {
		t.Fatalf("%d commits: %v, %d paths, more %v", maxPushCommits, err, len(full.Commits.paths), full.Commits.more)
	}
}
