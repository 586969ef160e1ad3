package agent

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"mesh/models"
)

// Probe sizes: a block at least, and at most what is worth writing at
// every look (a state file of a large declaration is a few hundred KiB).
const (
	minProbe = 4 << 10
	maxProbe = 4 << 20
)

// stateWrites keeps the host's own writes to its state dir that failed,
// by kind (its state, its journal, each outbox): a block of a probe may
// fit where they do not (a whole state file, a report with its services'
// lines, a leftover probe's block taken back), or a write may fail for
// another reason than space (an outbox that is not a directory), and the
// machine read healthy while none of them were saved.
type stateWrites struct {
	mu     sync.Mutex
	failed map[string]failedWrite
	seq    uint64
	// look is the look at the state dir under way (nil: none). A
	// state dir that hangs (a stuck network filesystem) holds it, and
	// the check says so after hangAfter rather than holding the host's
	// check loop, and every service's check, with it.
	look      *stateLook
	hangAfter time.Duration // 0: defaultHangAfter
}

// defaultHangAfter is how long a look at the state dir may take before
// the check fails saying it has not finished: a synced block takes
// milliseconds on a disk that works.
const defaultHangAfter = 10 * time.Second

// stateLook is a look at the state dir: every check asked for while it
// runs waits for it, so a state dir that hangs holds one goroutine, not
// one a look.
type stateLook struct {
	began time.Time
	done  chan struct{}
	res   *models.CheckResult // set before done is closed
}

// failedWrite is the last write of a kind, which failed.
type failedWrite struct {
	err  error
	size int    // bytes it wrote
	dir  string // the directory it wrote in
	file string // the file it appends to, if it appends ("": it writes a new one)
	seq  uint64 // which failure: one noted during a look is not cleared by it
}

// note records a write of kind, of size bytes in dir (appended to file,
// if not ""), and how it ended: a write that worked clears the kind.
func (w *stateWrites) note(kind, dir, file string, size int, err error) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		delete(w.failed, kind)
		return
	}
	if w.failed == nil {
		w.failed = map[string]failedWrite{}
	}
	w.seq++
	w.failed[kind] = failedWrite{err: err, size: min(size, maxProbe), dir: dir, file: file, seq: w.seq}
}

// retry makes a write like f where f wrote (a probe of its size, and the
// file it appends to opened for appending): a kind of write is cleared
// once one like it works, so a host that writes nothing while it waits
// (an idle one: its reports held in memory and sent from there) is
// healthy again once the space is back.
func (f failedWrite) retry() error {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	if f.file != "" {
		a, err := os.OpenFile(f.file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		a.Close()
	}
	return probeWrite(f.dir, max(minProbe, f.size))
}

// stateDirCheck is the host's own check, run with the services' checks:
// that its state dir takes its writes. A full or read-only state dir keeps
// the host from saving its state and journal, and its reports wait in
// memory, lost at its next restart, while every service it runs may pass
// its checks: the machine read healthy. It probes the state dir with a
// block, and retries each kind of the host's writes that failed (a write
// as large, where it wrote); it fails naming each that still fails. Only
// a failure is reported (nil otherwise), as for a service without a check
// of its own, so a machine whose state dir is fine reads as it did.
//
// A look that has not finished after hangAfter fails saying so, and goes
// on: the next check waits for it, not for one of its own.
func (w *stateWrites) stateDirCheck(dir string) *models.CheckResult {
	w.mu.Lock()
	l := w.look
	if l == nil {
		l = &stateLook{began: time.Now(), done: make(chan struct{})}
		w.look = l
		go func() {
			res := w.lookAt(dir)
			w.mu.Lock()
			l.res, w.look = res, nil
			w.mu.Unlock()
			close(l.done)
		}()
	}
	wait := cmp.Or(w.hangAfter, defaultHangAfter) - time.Since(l.began)
	w.mu.Unlock()
	t := time.NewTimer(max(wait, 0))
	defer t.Stop()
	select {
	case <-l.done:
		return l.res
	case <-t.C:
		return &models.CheckResult{Resource: models.HostStateCheck, At: time.Now().UTC(),
			Detail: fmt.Sprintf("the host's state dir has not finished a write begun %s ago (a filesystem that hangs): its state and journal are not saved, and its reports wait in memory, lost if it restarts",
				time.Since(l.began).Round(time.Second))}
	}
}

// lookAt probes dir and retries each kind of write that failed: the
// check's look, on a goroutine of its own.
func (w *stateWrites) lookAt(dir string) *models.CheckResult {
	w.mu.Lock()
	pending := maps.Clone(w.failed)
	w.mu.Unlock()
	var why []string
	if err := probeWrite(dir, minProbe); err != nil {
		why = append(why, fmt.Sprintf("%d bytes: %v", minProbe, err))
	}
	for _, kind := range slices.Sorted(maps.Keys(pending)) {
		f := pending[kind]
		if err := f.retry(); err != nil {
			why = append(why, fmt.Sprintf("its %s (%d bytes): %v", kind, f.size, f.err))
			continue
		}
		w.mu.Lock()
		if w.failed[kind].seq == f.seq {
			delete(w.failed, kind)
		}
		w.mu.Unlock()
	}
	if len(why) == 0 {
		return nil
	}
	return &models.CheckResult{Resource: models.HostStateCheck, At: time.Now().UTC(),
		Detail: fmt.Sprintf("the host's state dir takes no writes (%s): its state and journal are not saved, and its reports wait in memory, lost if it restarts",
			strings.Join(why, "; "))}
}

// probeWrite writes size bytes to a file in dir, synced, and removes it.
// A block at least, not an empty file: a full filesystem may still have
// inodes. The sync: one that allocates late says so only then. One name,
// truncated: a host killed between the write and the removal leaves one
// file, not one a look.
func probeWrite(dir string, size int) error {
	path := filepath.Join(dir, ".probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	chunk := make([]byte, min(size, 64<<10))
	for left := size; left > 0 && err == nil; left -= len(chunk) {
		_, err = f.Write(chunk[:min(left, len(chunk))])
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// sizeOf is v's size as a line of JSON (a journal entry), for a failed
// write's note.
func sizeOf(v any) int {
	b, _ := json.Marshal(v)
	return len(b) + 1
}

// sizeOfIndented is v's size as writeJSONAtomic writes it (the state).
func sizeOfIndented(v any) int {
	b, _ := json.MarshalIndent(v, "", "  ")
	return len(b) + 1
}
