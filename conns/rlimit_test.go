package conns

import (
	"errors"
	"log/slog"
	"math"
	"syscall"
	"testing"
)

// fakeLimits is a system whose setrlimit fails with setErr above maxSet.
type fakeLimits struct {
	lim     syscall.Rlimit
	getErr  error
	isRoot  bool
	nr      uint64
	maxSet  uint64 // the highest hard limit set accepts
	setErrs error
	asked   []syscall.Rlimit
}

func (f *fakeLimits) get() (syscall.Rlimit, error) { return f.lim, f.getErr }
func (f *fakeLimits) root() bool                   { return f.isRoot }
func (f *fakeLimits) nrOpen() uint64               { return f.nr }
func (f *fakeLimits) set(l syscall.Rlimit) error {
	f.asked = append(f.asked, l)
	if l.Max > f.maxSet || f.setErrs != nil {
		return errors.Join(syscall.EPERM, f.setErrs)
	}
	f.lim = l
	return nil
}

func TestRaiseFileLimit_Rules(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sys        fakeLimits
		soft, hard uint64
		err        bool
	}{
		{"RootRaisesHard", fakeLimits{lim: syscall.Rlimit{Cur: 1024, Max: 4096}, isRoot: true, nr: 1 << 20, maxSet: 1 << 20}, 1 << 20, 1 << 20, false},
		{"RootWithoutCapabilityFallsBack", fakeLimits{lim: syscall.Rlimit{Cur: 1024, Max: 4096}, isRoot: true, nr: 1 << 20, maxSet: 4096}, 4096, 4096, false},
		{"RootAlreadyHigh", fakeLimits{lim: syscall.Rlimit{Cur: 1 << 20, Max: 1 << 21}, isRoot: true, nr: 1 << 20, maxSet: 1 << 21}, 1 << 21, 1 << 21, false},
		{"UserRaisesSoft", fakeLimits{lim: syscall.Rlimit{Cur: 1024, Max: 4096}, nr: 1 << 20, maxSet: 4096}, 4096, 4096, false},
		{"UserAlreadyRaised", fakeLimits{lim: syscall.Rlimit{Cur: 4096, Max: 4096}, maxSet: 0}, 4096, 4096, false},
		{"ErrGet", fakeLimits{getErr: syscall.ENOSYS}, 0, 0, true},
		{"ErrSetSoft", fakeLimits{lim: syscall.Rlimit{Cur: 1024, Max: 4096}, maxSet: 4096, setErrs: syscall.EINVAL}, 1024, 4096, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			soft, hard, err := raiseFileLimit(slog.New(slog.DiscardHandler), &tc.sys)
			if soft != tc.soft || hard != tc.hard || (err != nil) != tc.err {
				t.Errorf("got %d, %d, %v; want %d, %d, error %v", soft, hard, err, tc.soft, tc.hard, tc.err)
			}
			for _, a := range tc.sys.asked {
				if !tc.sys.isRoot && a.Max > tc.hard {
					t.Errorf("not root, yet asked for hard %d", a.Max)
				}
			}
		})
	}
}

// On this machine: whatever the privileges, soft ends at hard.
func TestRaiseFileLimit(t *testing.T) {
	soft, hard, err := RaiseFileLimit(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	if soft != hard || now.Cur != soft || now.Max != hard {
		t.Errorf("returned %d/%d, in force %d/%d; want soft = hard, as returned", soft, hard, now.Cur, now.Max)
	}
}

func TestDefaultMax(t *testing.T) {
	for _, tc := range []struct {
		soft uint64
		want int
	}{
		{1024, 960},
		{1 << 20, 1<<20 - 64},
		{100, 50}, // 36 would leave too little; half stays for connections
		{math.MaxUint64, math.MaxInt32 - 64},
	} {
		if got := DefaultMax(tc.soft); got != tc.want {
			t.Errorf("DefaultMax(%d) = %d, want %d", tc.soft, got, tc.want)
		}
	}
}
