package agent

import (
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

// stateWrites keeps what the host's own writes to its state dir last met,
// by kind (its state, its journal, its outbox): a block of a probe may
// fit where they do not (a whole state file, a report with its services'
// lines, a leftover probe's block taken back), and the machine read
// healthy while none of them were saved.
type stateWrites struct {
	mu     sync.Mutex
	failed map[string]error // kind → the error of its last write, while it fails
	need   int              // the largest write that failed since space was last found
}

// note records a write of kind, of size bytes, and how it ended.
func (w *stateWrites) note(kind string, size int, err error) {
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
		w.failed = map[string]error{}
	}
	w.failed[kind] = err
	w.need = max(w.need, min(size, maxProbe))
}

// stateDirCheck is the host's own check, run with the services' checks:
// that its state dir takes its writes. A full or read-only state dir keeps
// the host from saving its state and journal, and its reports wait in
// memory, lost at its next restart, while every service it runs may pass
// its checks: the machine read healthy. The probe is as large as the
// largest of the host's writes that failed since it last passed: once
// that fits, they will when next made. Only a failure is reported (nil
// otherwise), as for a service without a check of its own, so a machine
// whose state dir is fine reads as it did.
func (w *stateWrites) stateDirCheck(dir string) *models.CheckResult {
	w.mu.Lock()
	size := max(minProbe, w.need)
	w.mu.Unlock()
	err := probeWrite(dir, size)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.failed, w.need = nil, 0
		return nil
	}
	why := []string{fmt.Sprintf("%d bytes: %v", size, err)}
	for _, k := range slices.Sorted(maps.Keys(w.failed)) {
		why = append(why, fmt.Sprintf("its %s: %v", k, w.failed[k]))
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

// sizeOf is v's size as JSON, for a failed write's note.
func sizeOf(v any) int {
	b, _ := json.Marshal(v)
	return len(b) + 1
}
