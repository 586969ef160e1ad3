package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"mesh/models"
)

// stateDirCheck is the host's own check, run with the services' checks:
// that its state dir takes writes. A full or read-only state dir keeps the
// host from saving its state and journal, and its reports wait in memory,
// lost at its next restart, while every service it runs may pass its
// checks: the machine read healthy. Only a failure is reported (nil
// otherwise), as for a service without a check of its own, so a machine
// whose state dir is fine reads as it did.
func stateDirCheck(dir string) *models.CheckResult {
	err := probeWrite(dir)
	if err == nil {
		return nil
	}
	return &models.CheckResult{Resource: models.HostStateCheck, At: time.Now().UTC(),
		Detail: fmt.Sprintf("the host's state dir takes no writes (%v): its state and journal are not saved, and its reports wait in memory, lost if it restarts", err)}
}

// probeWrite writes a block to a file in dir, synced, and removes it. A
// block, not an empty file: a full filesystem may still have inodes. The
// sync: one that allocates late says so only then. One name, truncated:
// a host killed between the write and the removal leaves one file, not
// one a look.
func probeWrite(dir string) error {
	path := filepath.Join(dir, ".probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
