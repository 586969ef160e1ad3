package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mesh/models"
	"mesh/testwait"
)

// smallTmpfs mounts a tmpfs of size for a state dir: the full disk (the
// tests run as root, as a host does).
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatalf("mounting a tmpfs for a state dir (the tests run as root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fillUp writes name in dir until the filesystem says ENOSPC.
func fillUp(t *testing.T, dir, name string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for err == nil {
		_, err = f.Write(block)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v", dir, err)
	}
}

// aFewKiBFree fills dir but for 8 KiB.
func aFewKiBFree(t *testing.T, dir string) {
	t.Helper()
	spare := filepath.Join(dir, "spare")
	if err := os.WriteFile(spare, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	fillUp(t, dir, "filler")
	if err := os.Remove(spare); err != nil {
		t.Fatal(err)
	}
}

// TestStateDirCheck_FailsWhileTheHostsWritesDoNotFit: the probe alone is
// a block, and the host's writes are larger: a state dir with a few KiB
// free (or with a probe left by a host killed mid-look, whose block the
// next probe takes back) passed while a report with its services' lines
// could not be queued and waited in memory. The check now probes as
// large as the write that failed, and passes again once that fits.
func TestStateDirCheck_FailsWhileTheHostsWritesDoNotFit(t *testing.T) {
	for name, leave := range map[string]func(t *testing.T, dir string){
		"AFewKiBFree": aFewKiBFree,
		"ALeftoverProbe": func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, ".probe"), make([]byte, 4096), 0o600); err != nil {
				t.Fatal(err)
			}
			fillUp(t, dir, "filler")
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := smallTmpfs(t, "1m")
			leave(t, dir)
			var w stateWrites
			o := outbox{dir: filepath.Join(dir, "outbox"), stateDir: dir, writes: &w}
			_, err := o.put(models.Report{Generation: 1, Outcome: models.OutcomeApplied,
				Logs: []models.ServiceLog{{Resource: "mod.svc", Why: models.LogFailed, Lines: []string{strings.Repeat("x", 12000)}}}})
			if err == nil {
				t.Fatal("a 12 KB report was queued on a full state dir")
			}
			c := w.stateDirCheck(dir)
			if c == nil || !strings.Contains(c.Detail, "its outbox") || !strings.Contains(c.Detail, "no space left on device") {
				t.Fatalf("the report waits in memory (%v), and the state dir's check says %+v", err, c)
			}
			if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
				t.Fatal(err)
			}
			if c := w.stateDirCheck(dir); c != nil {
				t.Fatalf("with the space back: %s", c.Detail)
			}
		})
	}
}

// TestStateDirCheck_ClearsOnceTheHostsWritesFitAgain: a 12 KB report could
// not be queued on a state dir with a few KiB free and was held in memory;
// the controller then took it from memory, and the host's next writes are
// small ones that fit. The check kept probing as large as the write that
// had failed and read unhealthy until 12 KB were free: a kind of write is
// cleared by one like it that works.
func TestStateDirCheck_ClearsOnceTheHostsWritesFitAgain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	dir := smallTmpfs(t, "1m")
	aFewKiBFree(t, dir)
	var w stateWrites
	o := outbox{dir: filepath.Join(dir, "outbox"), stateDir: dir, writes: &w}
	if _, err := o.put(models.Report{Generation: 1, Outcome: models.OutcomeApplied,
		Logs: []models.ServiceLog{{Resource: "mod.svc", Why: models.LogFailed, Lines: []string{strings.Repeat("x", 12000)}}}}); err == nil {
		t.Fatal("a 12 KB report was queued on a full state dir")
	}
	c := newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
	if err := o.flush(context.Background(), c); err != nil || o.heldAny() {
		t.Fatalf("flush: %v, held %v", err, o.heldAny())
	}
	if _, err := o.put(models.Report{Generation: 1, Outcome: models.OutcomeChecked}); err != nil {
		t.Fatalf("a small report: %v", err)
	}
	if c := w.stateDirCheck(dir); c != nil {
		t.Fatalf("nothing held in memory, every write since fits, and the check says: %s", c.Detail)
	}
}

// TestStateDirCheck_FailsWhileTheOutboxTakesNoWrites: the outbox cannot be
// written for another reason than space (its path is not a directory); the
// report waits in memory. The check's probe fit in the state dir, and it
// passed, forgetting the outbox's failure: the machine read healthy.
func TestStateDirCheck_FailsWhileTheOutboxTakesNoWrites(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "outbox"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var w stateWrites
	o := outbox{dir: filepath.Join(dir, "outbox"), stateDir: dir, writes: &w}
	_, err := o.put(models.Report{Generation: 1, Outcome: models.OutcomeApplied})
	if err == nil || !o.heldAny() {
		t.Fatalf("put: %v, held %v", err, o.heldAny())
	}
	for range 2 {
		if c := w.stateDirCheck(dir); c == nil || !strings.Contains(c.Detail, "not a directory") {
			t.Fatalf("the report waits in memory (%v), and the state dir's check says %+v", err, c)
		}
	}
}

// TestStateDirCheck_TheStateAsSaved: a failed save was noted at the
// state's size as compact JSON, and the state is written indented, half
// as large again: on a state dir with room for the one and not the other,
// the check's retry fit and cleared it while the state could not be
// saved, and an idle host read healthy.
func TestStateDirCheck_TheStateAsSaved(t *testing.T) {
	st := &State{Resources: map[string]*Managed{}}
	for i := range 300 {
		st.Resources[fmt.Sprintf("mod.svc%03d", i)] = &Managed{Kind: "file", Module: "mod", Build: 1,
			Digest: "sha256:0123456789abcdef", Extra: map[string]string{"a": "b"}}
	}
	dir := smallTmpfs(t, "1m")
	spare := filepath.Join(dir, "spare")
	if err := os.WriteFile(spare, make([]byte, (sizeOf(st)+4095)/4096*4096), 0o600); err != nil {
		t.Fatal(err)
	}
	fillUp(t, dir, "filler")
	if err := os.Remove(spare); err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: Config{StateDir: dir, Log: slog.New(slog.DiscardHandler)}, state: st}
	err := a.saveState()
	if err == nil {
		t.Fatal("the state was saved")
	}
	c := a.writes.stateDirCheck(dir)
	if a.saveState() == nil {
		t.Fatal("the state was saved after the check")
	}
	if c == nil || !strings.Contains(c.Detail, "its state") {
		t.Fatalf("the state cannot be saved (%v), and the state dir's check says %+v", err, c)
	}
}

// TestStateDirCheck_HeldBehindASmallerReport: a small report could not be
// queued on a full state dir and was held; a 12 KB one was held behind it
// without a write of its own, so the outbox's failure was noted at the
// small one's size. With 8 KiB back, the check's retry fit and cleared
// the outbox while the 12 KB report, still in memory (the controller not
// taking it), could not be written.
func TestStateDirCheck_HeldBehindASmallerReport(t *testing.T) {
	dir := smallTmpfs(t, "1m")
	fillUp(t, dir, "filler")
	var w stateWrites
	o := outbox{dir: filepath.Join(dir, "outbox"), stateDir: dir, writes: &w}
	if _, err := o.put(models.Report{Generation: 1, Outcome: models.OutcomeApplied}); err == nil {
		t.Fatal("a report was queued on a full state dir")
	}
	if _, err := o.put(models.Report{Generation: 2, Outcome: models.OutcomeApplied,
		Logs: []models.ServiceLog{{Resource: "mod.svc", Why: models.LogFailed, Lines: []string{strings.Repeat("x", 12000)}}}}); err == nil {
		t.Fatal("a 12 KB report was queued on a full state dir")
	}
	fi, err := os.Stat(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "filler"), fi.Size()-8192); err != nil {
		t.Fatal(err)
	}
	if c := w.stateDirCheck(dir); c == nil || !o.heldAny() {
		t.Fatalf("a 12 KB report waits in memory (%v) with 8 KiB free, and the state dir's check says %+v", o.heldAny(), c)
	}
}

// TestStateDirCheck_AStateDirThatHangsFailsInTime: a write to a state dir
// on a filesystem that hangs (a stuck network mount) never returns. The
// check's look hung with it, and with it the host's check loop: no
// service's check was run or reported again, and the machine read as its
// last look left it. Here the probe's file is a FIFO no one reads, whose
// open waits for a reader as a hung filesystem's write waits. The check
// fails in time saying so, the next check waits for the same look (one
// goroutine held, not one a look), and the check passes once the write
// has gone through.
func TestStateDirCheck_AStateDirThatHangsFailsInTime(t *testing.T) {
	dir := t.TempDir()
	probe := filepath.Join(dir, ".probe")
	if err := unix.Mkfifo(probe, 0o600); err != nil {
		t.Fatal(err)
	}
	w := &stateWrites{hangAfter: 200 * time.Millisecond}
	check := func() *models.CheckResult {
		got := make(chan *models.CheckResult, 1)
		go func() { got <- w.stateDirCheck(dir) }()
		select {
		case c := <-got:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("the check has not returned after 10s: it hangs with the state dir")
			return nil
		}
	}
	for i := range 2 {
		c := check()
		if c == nil || c.Resource != models.HostStateCheck || !strings.Contains(c.Detail, "has not finished a write begun") {
			t.Fatalf("look %d at a state dir that hangs: %+v", i+1, c)
		}
	}
	w.mu.Lock()
	first := w.look
	w.mu.Unlock()
	if first == nil {
		t.Fatal("no look under way while the state dir hangs")
	}

	// The write goes through: a reader takes the FIFO's bytes.
	r, err := os.OpenFile(probe, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go io.Copy(io.Discard, r)
	testwait.For(t, 10*time.Second, "the check passes once the state dir takes writes", func() bool { return check() == nil })
}
