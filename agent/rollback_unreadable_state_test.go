package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLauncher_TrialThatCorruptsTheStateIsRolledBackAndSaysSo: a release
// on trial wrote a state file the known-good release cannot read (a bad
// build's save, a torn write) and died before its reconcile marker. The
// launcher put known-good back and recorded the rollback, but the
// known-good host stopped at its unreadable state before reporting it:
// the controller never heard of the rollback, its rollout did not halt
// and the release was not failed. The host that stops on its state now
// says the rollback too.
func TestLauncher_TrialThatCorruptsTheStateIsRolledBackAndSaysSo(t *testing.T) {
	srv := newReportServer(t)
	dir, _, l := tryScript(t, func(dir string) string {
		return `printf '{"finished": 7, "resou' > ` + filepath.Join(dir, "state.json") + `; exit 1
`
	}, 10*time.Second, 0)
	var rb rollback
	if err := readJSON(rollbackPath(dir), &rb); err != nil || rb.From != "9.9.9" {
		t.Fatalf("the launcher recorded no rollback: %v %+v", err, rb)
	}
	if l.st.KnownGood != "1.0.0" {
		t.Fatalf("known-good is %s", l.st.KnownGood)
	}
	// The known-good host (this package's Run, as 1.0.0's binary runs it)
	// is started by the launcher with the record to report.
	if err := writeJSONAtomic(identityPath(dir), &Identity{Machine: "m1", Token: "t", Controllers: []string{srv.URL}, Keys: fuzzTrust()}, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	runErr := Run(ctx, Config{StateDir: dir, Root: t.TempDir()})
	srv.mu.Lock()
	got := srv.got
	srv.mu.Unlock()
	rolledBack := false
	for _, r := range got {
		if r.Outcome == "rolled_back" {
			rolledBack = true
		}
	}
	if !rolledBack {
		var outs []string
		for _, r := range got {
			outs = append(outs, r.Outcome+": "+r.Reason)
		}
		_, stillThere := os.Stat(rollbackPath(dir))
		t.Fatalf("the put-back known-good host never reported the rollback of 9.9.9 (record still unreported: %v); "+
			"it stopped with %v; the controller heard only %q", stillThere == nil, runErr, strings.Join(outs, " | "))
	}
}
