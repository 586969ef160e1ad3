package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestLauncher_UnwrittenRollbackIsNotHandedToALaterRelease: 9.9.9 fails
// its trial on a full disk (rollback.json cannot be written), so
// known-good 1.0.0 is told of it in MESH_ROLLBACK. 9.9.10 then wins its
// trial and is kept; started as known-good, it was handed the old
// rollback and reported rolled_back on the generation it upgraded on.
func TestLauncher_UnwrittenRollbackIsNotHandedToALaterRelease(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "versions", "9.9.9", "mesh-host")
	good := filepath.Join(dir, "versions", "9.9.10", "mesh-host")
	for _, p := range []string{bad, good} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	dgBad := script(t, bad, "exit 1\n")
	newRan := filepath.Join(dir, "new-ran")
	dgGood := script(t, good, `if [ "$1" = version ]; then echo 'mesh-host 9.9.10 (build x)'; exit 0; fi
if [ -n "$`+EnvTrialVersion+`" ]; then touch `+markerPath(dir, "9.9.10")+`; exit 0; fi
printf 'env=%s' "$`+EnvRollback+`" > `+newRan+`; exec sleep 600
`)
	kg := filepath.Join(dir, "known-good")
	script(t, kg, `if [ ! -e `+dir+`/h1 ]; then touch `+dir+`/h1
printf '{"version":"9.9.9","digest":"`+dgBad+`","path":"`+bad+`"}' > `+pendingPath(dir)+`; exit 3; fi
printf '{"version":"9.9.10","digest":"`+dgGood+`","path":"`+good+`"}' > `+pendingPath(dir)+`; exit 3
`)
	if err := os.Mkdir(rollbackPath(dir), 0o700); err != nil { // the record cannot be written
		t.Fatal(err)
	}
	l := &launcher{cfg: LaunchConfig{StateDir: dir, TrialDeadline: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}, self: kg,
		st: launcherState{KnownGood: "1.0.0", KnownGoodPath: kg, Launcher: "1.0.0"}, exits: map[int]chan syscall.WaitStatus{}}
	l.probe = func(string) error { return os.ErrPermission }
	reapCtx, stopReap := context.WithCancel(context.Background())
	defer stopReap()
	go l.reap(reapCtx)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	if err := l.loop(ctx, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(newRan)
	if err != nil {
		t.Fatalf("9.9.10 was not started as known-good (known-good now %s)", l.st.KnownGood)
	}
	if string(b) != "env=" {
		t.Fatalf("known-good %s was handed %s: the rollback of 9.9.9 to 1.0.0, already told to 1.0.0", l.st.KnownGood, b)
	}
}
