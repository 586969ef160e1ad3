package agent

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"mesh/models"
)

// The lines shipped of a service are its last 100 within 16 KiB; the host's
// own supervisor reads at most 4 × that from the end of its log files
// (tailFiles/readEnd). Under --services systemd, Tail reads everything
// journalctl prints into memory before cutting it: a unit whose last
// messages are long (journald keeps messages far past 16 KiB: a service
// logging through the journal's native protocol, or up to LineMax=48K a
// line on stdout, × 101 lines) makes the host hold all of it. The stand-in
// journalctl prints 64 MiB; the host keeps 16 KiB of it.
func TestSystemd_TailOfTheJournalIsBounded(t *testing.T) {
	root, err := openMachineRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stand := filepath.Join(t.TempDir(), "journalctl")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\nhead -c 67108864 /dev/zero | tr '\\0' a\necho\necho last\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSystemd(root)
	s.journalctl = stand
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	lines, _, err := s.Tail(context.Background(), "web.service", models.MaxLogLines, models.MaxLogBytes)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 || lines[len(lines)-1] != "last" {
		t.Fatalf("lines %d, last %q", len(lines), lines[len(lines)-1])
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Fatalf("reading the journal's tail of one unit allocated %d MiB to ship at most 16 KiB", got>>20)
	}
}
