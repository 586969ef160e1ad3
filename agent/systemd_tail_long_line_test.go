package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// A unit whose last journal message is one line longer than the kept 64 KiB
// (a native-protocol message, a long panic line): the host's own
// supervisor (tailFiles) ships the end of that line; under systemd Tail
// drops everything up to the only newline and ships nothing.
func TestSystemd_TailOfOneLongLastLineShipsIt(t *testing.T) {
	root, err := openMachineRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stand := filepath.Join(dir, "journalctl")
	script := "#!/bin/sh\necho starting\nhead -c 100000 /dev/zero | tr '\\0' x\necho ' panic: out of memory'\n"
	if err := os.WriteFile(stand, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSystemd(root)
	s.journalctl = stand
	lines, cut, err := s.Tail(context.Background(), "web.service", models.MaxLogLines, models.MaxLogBytes)
	if err != nil {
		t.Fatal(err)
	}

	// The same output as a supervisor's log file.
	log := filepath.Join(dir, "web.log")
	if err := os.WriteFile(log, []byte("starting\n"+strings.Repeat("x", 100000)+" panic: out of memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	flines, fcut, err := tailFiles([]string{log}, models.MaxLogLines, models.MaxLogBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("supervisor: %d lines (cut %v), last ends %q", len(flines), fcut, lastEnd(flines))
	t.Logf("systemd:    %d lines (cut %v)", len(lines), cut)
	if len(lines) == 0 {
		t.Fatalf("the unit's last line (the reason it failed) was not shipped at all: 0 lines, cut=%v; the supervisor ships %d", cut, len(flines))
	}
}

func lastEnd(ls []string) string {
	if len(ls) == 0 {
		return ""
	}
	l := ls[len(ls)-1]
	return l[max(0, len(l)-30):]
}
