package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHost_UnreadableStateSaysSo: a state file that cannot be read (a disk
// fault, a hand edit) stops the host — applying without knowing what it
// finished could take an older declaration — and the controller is told
// why (a refusal naming no send, shown as the machine's last outcome),
// not only the host's own log: the machine would otherwise just go
// offline with no reason anywhere an operator looks.
func TestHost_UnreadableStateSaysSo(t *testing.T) {
	srv := newReportServer(t)
	dir := t.TempDir()
	if err := writeJSONAtomic(identityPath(dir), &Identity{Machine: "m1", Token: "t", Controllers: []string{srv.URL}, Keys: fuzzTrust()}, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(`{"finished": 4, "resou`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := newAgent(Config{StateDir: dir, Root: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "state file cannot be read") {
		t.Fatalf("newAgent: %v", err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.got) != 1 || srv.got[0].Outcome != "refused" || srv.got[0].Send != "" || !strings.Contains(srv.got[0].Reason, "state file cannot be read") {
		t.Fatalf("reports: %+v", srv.got)
	}
	// And on the host's own record.
	if js, _ := ReadJournal(dir); len(js) != 1 || js[0].Outcome != "refused" || !strings.Contains(js[0].Reason, "state file cannot be read") {
		t.Fatalf("journal: %+v", js)
	}
}
