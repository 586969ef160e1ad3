package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A journal with one damaged line longer than any entry (65 MiB of zeros,
// a crash's doing) printed nothing: the read stopped there, "token too
// long", and the entries before and after it went unprinted.
func TestJournal_AnOverlongDamagedLineIsSkipped(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "host.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := `{"time":"2026-01-01T00:00:00Z","send":"s","generation":7,"digest":"sha256:x","outcome":"applied","reason":"","actions":[]}` + "\n"
	f, err := os.Create(filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(good)
	_, _ = f.Write(make([]byte, 65<<20))
	_, _ = f.WriteString("\n" + good)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runHost(t, "journal", "--state", dir)
	if code != 0 || strings.Count(out, "generation 7") != 2 || !strings.Contains(out, "could not be read and were skipped") {
		t.Fatalf("journal with one damaged over-long line: exit %d, out %q, err %q; want both entries and the damaged line named", code, out, errOut)
	}
}
