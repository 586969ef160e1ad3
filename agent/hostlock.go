package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostLockName is the file a running host holds locked in its state dir:
// one host per machine. A launcher killed during a trial, its
// launcher.json lost, started known-good beside the trial host still
// running (its unit's KillMode=process leaves the host), and the two
// applied, reported and wrote the same state.
const hostLockName = "host.lock"

// hostLockWait is how long a host starting waits for the lock: a host
// handing over or stopping may still be exiting.
const hostLockWait = 15 * time.Second

// lockHost takes the state dir's host lock, waiting up to hostLockWait,
// and writes this process's pid and start time in it. The lock goes with
// the process (flock: released when its file closes, at exit too); the
// file is opened close-on-exec, so services the host starts do not hold
// it.
func lockHost(stateDir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(stateDir, hostLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(hostLockWait)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			holder, _ := readHostLock(f)
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("another host runs on state dir %s (pid %d): one host per machine", stateDir, holder.PID)
			}
			return nil, err
		}
		time.Sleep(100 * time.Millisecond) // a lock held by a process that is not ours to wait on
	}
	start, _, _ := procStat(os.Getpid())
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d %d\n", os.Getpid(), start)), 0)
	}
	return func() { _ = f.Close() }, nil
}

// heldHost is the host holding the state dir's lock, if one does.
func heldHost(stateDir string) (pidRecord, bool) {
	f, err := os.Open(filepath.Join(stateDir, hostLockName))
	if err != nil {
		return pidRecord{}, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		return pidRecord{}, false // free: no host runs
	}
	rec, err := readHostLock(f)
	return rec, err == nil && alive(rec)
}

func readHostLock(f *os.File) (pidRecord, error) {
	b := make([]byte, 64)
	n, _ := f.ReadAt(b, 0)
	fields := strings.Fields(string(b[:n]))
	if len(fields) != 2 {
		return pidRecord{}, fmt.Errorf("host lock: %q", b[:n])
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		return pidRecord{}, err
	}
	start, err := strconv.ParseUint(fields[1], 10, 64)
	return pidRecord{PID: pid, StartTime: start}, err
}
