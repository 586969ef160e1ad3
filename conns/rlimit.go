package conns

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// FileReserve is the descriptors DefaultMax keeps back from connections
// for the process's own use: the store's pool (at most 20), its files,
// blobs being served, the listener, epoll, logs.
const FileReserve = 64

// hardCeiling is the hard limit root asks for when fs.nr_open cannot be
// read: the kernel's default nr_open.
const hardCeiling = 1 << 20

// RaiseFileLimit raises RLIMIT_NOFILE's soft limit to the hard one. As root
// it first tries to raise the hard limit too, to fs.nr_open (1<<20 if that
// cannot be read); without CAP_SYS_RESOURCE (a container, say) that fails,
// is logged at debug, and the soft limit goes to the existing hard one. It
// returns the limits in force, for the caller to log.
//
// Go (1.19+) already raises the soft limit to the hard one at start on
// Linux; what this adds is the hard raise and the numbers. A process exec'd
// by the controller inherits the raised limits.
func RaiseFileLimit(log *slog.Logger) (soft, hard uint64, err error) {
	return raiseFileLimit(log, osLimits{})
}

// DefaultMax is the connection cap for a soft open-file limit: the limit
// less FileReserve, but never less than half the limit, so a tiny limit
// still serves.
func DefaultMax(soft uint64) int {
	n := int(min(soft, math.MaxInt32))
	return max(n-FileReserve, n/2)
}

// fileLimits is the system, for raiseFileLimit; tests fake it.
type fileLimits interface {
	get() (syscall.Rlimit, error)
	set(syscall.Rlimit) error
	root() bool
	nrOpen() uint64
}

func raiseFileLimit(log *slog.Logger, sys fileLimits) (soft, hard uint64, err error) {
	lim, err := sys.get()
	if err != nil {
		return 0, 0, fmt.Errorf("reading the open-file limit: %w", err)
	}
	if sys.root() {
		if want := sys.nrOpen(); want > lim.Max {
			err := sys.set(syscall.Rlimit{Cur: want, Max: want})
			if err == nil {
				return want, want, nil
			}
			log.Debug("the hard open-file limit stays: raising it needs CAP_SYS_RESOURCE", "hard", lim.Max, "wanted", want, "err", err)
		}
	}
	if lim.Cur < lim.Max {
		if err := sys.set(syscall.Rlimit{Cur: lim.Max, Max: lim.Max}); err != nil {
			return lim.Cur, lim.Max, fmt.Errorf("raising the open-file limit from %d to %d: %w", lim.Cur, lim.Max, err)
		}
		lim.Cur = lim.Max
	}
	return lim.Cur, lim.Max, nil
}

type osLimits struct{}

func (osLimits) get() (syscall.Rlimit, error) {
	var l syscall.Rlimit
	err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	return l, err
}

func (osLimits) set(l syscall.Rlimit) error { return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l) }

func (osLimits) root() bool { return os.Geteuid() == 0 }

func (osLimits) nrOpen() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return hardCeiling
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n == 0 {
		return hardCeiling
	}
	return n
}
