package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"mesh/models"
	"mesh/version"
)

// LaunchConfig is how `mesh-host launch` runs the host.
type LaunchConfig struct {
	StateDir string
	// RunArgs are the flags of `mesh-host run` (passed through).
	RunArgs []string
	// TrialDeadline is how long a new release has to complete a reconcile
	// (poll, and have its upgraded report accepted) before known-good is
	// put back.
	TrialDeadline time.Duration
	// Args is the launcher's own command line after argv[0] (`launch` and
	// its flags): a launcher that moves to a release re-executes that
	// release's binary with them.
	Args []string
	Log  *slog.Logger
}

// launcherState is launcher.json: the known-good release, the launcher
// running now, a launcher on trial, and the host process it runs.
type launcherState struct {
	KnownGood       string `json:"known_good"`
	KnownGoodPath   string `json:"known_good_path"`
	KnownGoodDigest string `json:"known_good_digest,omitempty"`
	// Launcher is the version of the launcher process running now; the
	// host puts it in its reports (launcher_version).
	Launcher string `json:"launcher,omitempty"`
	// LauncherTrial is a launcher re-executed into a release and not yet
	// proven: the stable path still names the one before it.
	LauncherTrial *launcherTrial `json:"launcher_trial,omitempty"`
	// LauncherRefused are the digests of releases whose launcher failed
	// its trial: the launcher does not move to them again.
	LauncherRefused []string `json:"launcher_refused,omitempty"`
	// LauncherFailure says why the last launcher trial failed.
	LauncherFailure string `json:"launcher_failure,omitempty"`
	// HostPID and HostStart name the host process the launcher runs, so a
	// launcher started afresh (its predecessor died) stops a host it
	// cannot reap rather than run a second one beside it.
	HostPID   int    `json:"host_pid,omitempty"`
	HostStart uint64 `json:"host_start,omitempty"`
	// Previous is the known-good before the release kept last: that
	// release is rolled back to it if its host crash-loops (exits
	// crashLoopExits times in a row, each within a minute of its start)
	// before it has run provenAfter in one go. Its trial proved one
	// reconcile, not every start: a release that dies at the next
	// generation or the next boot ran on, restarted for good, with no
	// host reaching the controller. Cleared when proven or used.
	Previous *keptRelease `json:"previous,omitempty"`
	// LauncherInterrupted counts, by digest, the launcher trials the
	// machine's restart interrupted: such a trial is tried again (up to
	// launcherRetries times) rather than refused for good.
	LauncherInterrupted map[string]int `json:"launcher_interrupted,omitempty"`
	// LauncherRetry is a launcher trial interrupted by the machine's
	// restart, tried again once the known-good host runs.
	LauncherRetry *launcherTrial `json:"launcher_retry,omitempty"`
	// CrashRolledBack is the release a crash rollback left, while the
	// release put back has not run a minute in one go: if that one
	// crash-loops too, the machine is at fault, not the release, and the
	// rollback is withdrawn while no host has reported it.
	CrashRolledBack *crashRollback `json:"crash_rolled_back,omitempty"`
	// SaysReady are the digests (or the paths, of a binary that could not
	// be read) of the releases whose host has told the launcher it got
	// through its start (EnvReadyFD): such a release's host that does not
	// at a later start, while a crash loop of it would still be rolled
	// back or withdrawn, is stopped and counted as one that exited.
	SaysReady []string `json:"says_ready,omitempty"`
}

// crashRollback is a crash rollback that may yet be withdrawn: the release
// it left, and the unreported record it carried (put back if it is).
type crashRollback struct {
	From   keptRelease `json:"from"`
	Before *rollback   `json:"before,omitempty"`
}

// keptRelease is a host release the launcher has kept as known-good.
type keptRelease struct {
	Version string `json:"version"`
	Path    string `json:"path"`
	Digest  string `json:"digest,omitempty"`
}

const (
	// crashLoopExits is how many exits in a row, each within a minute of
	// its start, make a kept release's host crash-looping.
	crashLoopExits = 5
	// readyWithin is how long a kept release's host has, at each start, to
	// say it got through it (its state read, its services adopted): its
	// trial, from the same start, had the trial's deadline (two minutes)
	// to complete a whole reconcile. A release that hangs at its start
	// (no exit, no poll) was kept for good, and then proven.
	readyWithin = 2 * time.Minute
	// provenAfter is how long a kept release's host runs in one go before
	// a crash loop is no longer taken as the release's doing (the release
	// before it is forgotten): after that, the machine or its
	// declarations changed, and an older release would not mend it.
	provenAfter = time.Hour
)

func launcherPath(dir string) string { return filepath.Join(dir, "launcher.json") }

// Launch is the launcher a service manager runs. It runs the known-good
// host; when the host hands over to a staged release (exit status
// ExitUpgrade), it runs that release on trial and keeps it only if it
// completes a reconcile within the deadline; otherwise it puts known-good
// back and records why. It is a child subreaper: services orphaned by a
// host's exit are its children, reaped here, and adopted by the next host.
func Launch(ctx context.Context, cfg LaunchConfig) error {
	if cfg.TrialDeadline <= 0 {
		cfg.TrialDeadline = defaultTrialDeadline
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		cfg.Log.Warn("cannot become a child subreaper; orphaned services go to init", "err", err)
	}
	if cfg.Args == nil {
		cfg.Args = os.Args[1:]
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var st launcherState
	if err := readJSON(launcherPath(cfg.StateDir), &st); err != nil || st.KnownGoodPath == "" {
		st = launcherState{KnownGood: version.Version, KnownGoodPath: self}
	}
	l := &launcher{cfg: cfg, st: st, self: self, exits: map[int]chan syscall.WaitStatus{}}
	// A launcher re-executed in place finds the host it ran in its
	// environment: that host is its child still, and is adopted.
	adopted := l.adoptHost()
	if err := l.startUp(); err != nil {
		return err
	}
	// The reaper outlives the loop: stopping the host waits for its exit.
	reapCtx, stopReaping := context.WithCancel(context.Background())
	defer stopReaping()
	go l.reap(reapCtx)
	trialCtx, stopTrial := context.WithCancel(ctx)
	defer stopTrial()
	go l.launcherTrial(trialCtx)
	return l.loop(ctx, adopted)
}

type launcher struct {
	cfg   LaunchConfig
	self  string // this launcher's binary
	exits map[int]chan syscall.WaitStatus
	// ready is, by host process, its pipe to say it got through its start
	// (EnvReadyFD).
	ready map[int]*readiness
	mu    sync.Mutex // guards exits and ready

	// stMu guards st and launcher.json, which the loop and the launcher's
	// own trial both write.
	stMu sync.Mutex
	st   launcherState
	// onTrial: a host release is on trial now (the launcher does not hand
	// over to another launcher meanwhile).
	onTrial bool
	// exec replaces this process (unix.Exec; a test may stand in).
	exec func(path string, argv, env []string) error
	// reexeced: this process is a launcher re-executed in place (it was
	// handed a host, whether or not that host still ran to be adopted).
	reexeced bool
	// probe says whether a release's launcher can adopt a running host
	// (probeHandover; a test may stand in).
	probe func(path string) error
	// look is how often a trial's marker is looked for (0: every 100 ms).
	look time.Duration
	// unwritten is a rollback whose record could not be written (a full
	// state dir): written when the known-good host is next started, and
	// handed to it in its environment (EnvRollback) until then. Only the
	// loop's goroutine uses it.
	unwritten *rollback
	// firstWait is the wait before a host that exited is started again,
	// doubled at each exit in a row up to 30 s (0: a second).
	firstWait time.Duration
	// provenIn is how long a kept release's host runs in one go to be
	// proven (0: provenAfter).
	provenIn time.Duration
	// readyIn is how long a watched host has to say it got through its
	// start (0: readyWithin).
	readyIn time.Duration
	// own is the binary started when known-good's cannot be ("": this
	// launcher's own image, /proc/<pid>/exe).
	own string
}

// save writes launcher.json; the caller holds stMu.
func (l *launcher) save() error {
	return writeJSONAtomic(launcherPath(l.cfg.StateDir), l.st, 0o600)
}

// reap waits for every child — the host it started and the services
// orphaned to it — and hands the host's exit status to whoever waits.
func (l *launcher) reap(ctx context.Context) {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			l.mu.Lock()
			ch := l.exits[pid]
			delete(l.exits, pid)
			l.mu.Unlock()
			l.exitedReady(pid)
			if ch != nil {
				ch <- ws
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-tick.C:
		}
	}
}

// start runs a host binary with run's flags; env adds to the environment.
func (l *launcher) start(path string, env ...string) (*os.Process, chan syscall.WaitStatus, error) {
	// A host it did not start holding the state dir (one that took the
	// lock after this launcher's start looked): stopped first, or the
	// host started here waits for the lock and exits, again and again.
	if rec, held := heldHost(l.cfg.StateDir); held && rec.PID != os.Getpid() && parentOf(rec.PID) != os.Getpid() {
		l.cfg.Log.Warn("a host this launcher did not start runs on its state dir; stopping it", "pid", rec.PID)
		stopStray(rec.PID, rec.StartTime)
	}
	ch := make(chan syscall.WaitStatus, 1)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := os.StartProcess(path, append([]string{path, "run"}, l.cfg.RunArgs...), &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, w},
		Env:   append(append(os.Environ(), EnvLauncher+"=1", EnvReadyFD+"=3"), env...),
	})
	w.Close()
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	l.exits[p.Pid] = ch
	if l.ready == nil {
		l.ready = map[int]*readiness{}
	}
	ready := make(chan struct{})
	l.ready[p.Pid] = &readiness{r: r, said: ready}
	go l.awaitReady(r, ready, path)
	l.recordHost(p.Pid)
	return p, ch, nil
}

// awaitReady closes ready when the host writes its line on r (EnvReadyFD),
// and notes that its release says so. It ends when the host closes r's
// other end, written or not (at its exit at the latest).
func (l *launcher) awaitReady(r *os.File, ready chan struct{}, path string) {
	defer r.Close()
	var b [1]byte
	if n, _ := r.Read(b[:]); n == 0 {
		return
	}
	close(ready)
	key := path
	if dg, err := digestOf(path); err == nil {
		key = dg
	}
	l.stMu.Lock()
	defer l.stMu.Unlock()
	if !slices.Contains(l.st.SaysReady, key) {
		// The latest few: the releases a machine goes back and forth
		// between, not every one it ever ran.
		l.st.SaysReady = append(l.st.SaysReady[max(0, len(l.st.SaysReady)-15):], key)
		if err := l.save(); err != nil {
			l.cfg.Log.Error("writing launcher.json", "err", err)
		}
	}
}

// readiness is a host process's pipe to say it got through its start:
// said is closed when it has.
type readiness struct {
	r    *os.File
	said chan struct{}
}

// readyOf is the channel closed when host pid says it got through its
// start (nil: it has exited).
func (l *launcher) readyOf(pid int) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rd := l.ready[pid]; rd != nil {
		return rd.said
	}
	return nil
}

// exitedReady forgets an exited host's pipe, closing the launcher's end:
// a host of a release before EnvReadyFD leaves the other end open in the
// services it starts, and the pipe, with the goroutine reading it, lived
// as long as they did.
func (l *launcher) exitedReady(pid int) {
	l.mu.Lock()
	rd := l.ready[pid]
	delete(l.ready, pid)
	l.mu.Unlock()
	if rd != nil {
		rd.r.Close()
	}
}

// watchStart says whether known-good's host must say, at its start, that
// it got through it: a release kept and not yet proven (or put back by a
// crash rollback that may yet be withdrawn) whose host has said so before
// — a release of an earlier launcher's time never does, and is not
// stopped for it.
func (l *launcher) watchStart() bool {
	l.stMu.Lock()
	defer l.stMu.Unlock()
	if l.st.Previous == nil && l.st.CrashRolledBack == nil {
		return false
	}
	key := cmp.Or(l.st.KnownGoodDigest, l.st.KnownGoodPath)
	if l.st.KnownGoodDigest == "" {
		if dg, err := digestOf(l.st.KnownGoodPath); err == nil {
			key = dg
		}
	}
	return slices.Contains(l.st.SaysReady, key)
}

// recordHost notes the host process the launcher runs in launcher.json.
func (l *launcher) recordHost(pid int) {
	l.stMu.Lock()
	defer l.stMu.Unlock()
	l.st.HostPID = pid
	l.st.HostStart, _ = startTime(pid)
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
}

// loop supervises the known-good host: adopted (a host the launcher ran
// before it re-executed itself) or started here. A host that exits is
// started again after a wait that doubles; a kept release whose host
// crash-loops is rolled back to the release before it (crashRollBack).
func (l *launcher) loop(ctx context.Context, adopted *child) error {
	first := l.firstWait
	if first <= 0 {
		first = time.Second
	}
	backoff, crashes := first, 0
	// withdrawn: a crash rollback was withdrawn (the machine at fault),
	// so crash rollbacks from here on keep the backoff growing.
	withdrawn := false
	for {
		var p *os.Process
		var exited chan syscall.WaitStatus
		// ready is closed when a watched host says it got through its
		// start; hung fires if it has not within readyWithin.
		var ready chan struct{}
		var hung <-chan time.Time
		if adopted != nil {
			p, exited, adopted = adopted.p, adopted.exited, nil
		} else {
			var err error
			if p, exited, err = l.startKnownGood(); err != nil {
				return err
			}
			if ready = l.readyOf(p.Pid); ready != nil && l.watchStart() {
				hung = time.After(l.readyLimit())
			} else {
				ready = nil
			}
			l.retryLauncher(ctx, p.Pid)
		}
		started := time.Now()
		var proven, stands <-chan time.Time
		arm := func() {
			l.stMu.Lock()
			defer l.stMu.Unlock()
			if l.st.Previous != nil {
				proven = time.After(cmp.Or(l.provenIn, provenAfter))
			}
			if l.st.CrashRolledBack != nil {
				stands = time.After(time.Minute)
			}
		}
		if hung == nil {
			arm()
		}
		var ws syscall.WaitStatus
		// stuck: the host was stopped for not getting through its start
		// (its wait status is the stop's): a crash, however long it took.
		stuck := false
	wait:
		for {
			select {
			case <-ctx.Done():
				stop(p, exited)
				return nil
			case <-ready:
				// A host hung at its start is neither proven nor the
				// rollback's release standing: counted from here.
				ready, hung = nil, nil
				l.cfg.Log.Info("the host got through its start", "pid", p.Pid)
				arm()
			case <-hung:
				l.cfg.Log.Error("the host did not get through its start; stopping it, as a host that exited",
					"within", l.readyLimit(), "pid", p.Pid)
				ws, stuck = stopped(p, exited), true
				break wait
			case <-proven:
				proven = nil
				l.proven()
			case <-stands:
				stands = nil
				l.crashRollbackStands()
			case ws = <-exited:
				break wait
			}
		}
		if ws.Exited() && ws.ExitStatus() == ExitUpgrade {
			kept, err := l.tryRelease(ctx)
			if err != nil {
				return err
			}
			// A release kept and not moved to: its host, running, is
			// supervised from here like any known-good host.
			adopted = kept
			backoff, crashes = first, 0
			continue
		}
		last := describeExit(ws)
		if stuck {
			last = fmt.Sprintf("it did not get through its start within %s, and was stopped", l.readyLimit())
		}
		if time.Since(started) > time.Minute && !stuck {
			backoff, crashes, withdrawn = first, 0, false
		} else if crashes++; crashes >= crashLoopExits {
			if l.withdrawCrashRollback() {
				// Known-good is the release left again, started with the
				// backoff as it is: while the machine stays broken, the
				// two releases take turns no faster than it allows.
				crashes, withdrawn = 0, true
			} else if l.crashRollBack(crashes, last) {
				crashes = 0
				if !withdrawn {
					backoff = first
					continue
				}
			}
		}
		l.cfg.Log.Warn("host exited; starting it again", "status", ws, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// startKnownGood starts the known-good host, handing it a rollback whose
// record could not be written. A known-good binary that does not match its
// digest, or cannot be started, is not retried for good while no host
// runs: the launcher's own binary (a host too, and proven: it runs) is
// known-good in its place. That host, of another version than the
// machine's target, fetches the release again, and its trial makes it
// known-good again.
func (l *launcher) startKnownGood() (p *os.Process, exited chan syscall.WaitStatus, err error) {
	l.stMu.Lock()
	path, v, dg := l.st.KnownGoodPath, l.st.KnownGood, l.st.KnownGoodDigest
	l.stMu.Unlock()
	var env []string
	if rb := l.unwritten; rb != nil && rb.To != v {
		// Another release was kept since: the rollback was to a
		// known-good this one is not, and it is not this host's
		// to report.
		l.unwritten = nil
	} else if rb != nil {
		if err := writeJSONAtomic(rollbackPath(l.cfg.StateDir), rb, 0o600); err == nil {
			l.unwritten = nil
		} else if b, err := json.Marshal(rb); err == nil {
			env = append(env, EnvRollback+"="+string(b))
		}
	}
	why := ""
	if dg != "" {
		if ok, err := fileHasDigest(path, dg); err != nil {
			why = err.Error()
		} else if !ok {
			why = "it is missing or does not match its digest " + dg
		}
	}
	self := cmp.Or(l.own, "/proc/"+strconv.Itoa(os.Getpid())+"/exe")
	if why == "" {
		if p, exited, err = l.start(path, env...); err == nil {
			l.cfg.Log.Info("launched", "version", v, "pid", p.Pid)
			return p, exited, nil
		}
		why = "it could not be started: " + err.Error()
		if !unrunnable(err) {
			// Of the moment (no memory, too many processes): the
			// launcher's own image runs this once, and known-good stays.
			l.cfg.Log.Error("known-good could not be started; running the launcher's own binary this once", "known_good", v, "path", path, "err", err)
			if p, exited, err = l.start(self, env...); err != nil {
				return nil, nil, fmt.Errorf("starting known-good %s (%s), and the launcher's own binary: %w", path, why, err)
			}
			return p, exited, nil
		}
	}
	// The running launcher's image, whatever has become of the file it
	// was started from, becomes known-good: the release of the binary
	// that cannot be run is fetched again by its host, and tried, and a
	// failed trial of it goes back to this one (not to itself). The
	// release before is forgotten: it was known-good's, not this one's.
	l.cfg.Log.Error("known-good's binary cannot be run; the launcher's own binary is known-good in its place, until the release is fetched again",
		"known_good", v, "path", path, "why", why, "instead", version.Version)
	ownDigest, err := digestOf(self)
	if err != nil {
		return nil, nil, fmt.Errorf("starting known-good %s (%s), and reading the launcher's own binary: %w", path, why, err)
	}
	if dg != "" && ownDigest == dg && l.staged(path) {
		// The launcher runs known-good's own release (it moved to it):
		// its image mends the file, which the stable path may name too,
		// where a restart of the machine would find nothing to start.
		if l.mend(self, path, dg) {
			l.cfg.Log.Warn("known-good's binary put back from the launcher's own image", "known_good", v, "path", path, "was", why)
			if p, exited, err = l.start(path, env...); err == nil {
				return p, exited, nil
			}
		}
	}
	l.stMu.Lock()
	l.st.KnownGood, l.st.KnownGoodPath, l.st.KnownGoodDigest, l.st.Previous = version.Version, cmp.Or(l.own, l.self, self), ownDigest, nil
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
	l.stMu.Unlock()
	if p, exited, err = l.start(self, env...); err != nil {
		return nil, nil, fmt.Errorf("starting known-good %s (%s), and the launcher's own binary: %w", path, why, err)
	}
	return p, exited, nil
}

// unrunnable says whether a start failed for the binary itself (gone,
// not an executable, not allowed), not for the moment.
func unrunnable(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) ||
		errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP)
}

// staged says whether path is a release binary the host staged itself
// (versions/<v>/mesh-host): the only files the launcher writes back. The
// launcher's own binary may be an installed one (a package's), which an
// upgrade of the package replaces while the launcher runs on.
func (l *launcher) staged(path string) bool {
	rel, err := filepath.Rel(filepath.Join(l.cfg.StateDir, "versions"), path)
	return err == nil && filepath.IsLocal(rel) && filepath.Base(rel) == "mesh-host" && filepath.Dir(filepath.Dir(rel)) == "."
}

// mend writes the binary from over path and says whether path then
// matches digest.
func (l *launcher) mend(from, path, digest string) bool {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false
	}
	if err := copyFile(from, path, 0o755); err != nil {
		l.cfg.Log.Error("putting known-good's binary back", "path", path, "err", err)
		return false
	}
	ok, _ := fileHasDigest(path, digest)
	return ok
}

// digestOf is a file's sha256 digest, as releases name theirs.
func digestOf(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// proven forgets the release before known-good: known-good's host has run
// provenAfter in one go.
func (l *launcher) proven() {
	l.stMu.Lock()
	defer l.stMu.Unlock()
	if l.st.Previous == nil {
		return
	}
	l.cfg.Log.Info("kept release proven: a crash loop from now on is not rolled back", "version", l.st.KnownGood, "ran", provenAfter)
	l.st.Previous = nil
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
}

// crashRollBack puts back the release known-good replaced when known-good,
// kept after its trial and not yet proven, exited n times in a row, each
// within a minute of its start. The rollback is recorded as a failed
// trial's is: the host started next reports it and refuses the release,
// and the controller fails the release (its rollout halts, done or not).
// False when there is no release to go back to (or its binary is not
// intact): the host is started again as before.
func (l *launcher) crashRollBack(n int, last string) bool {
	l.stMu.Lock()
	prev := l.st.Previous
	if prev == nil {
		l.stMu.Unlock()
		return false
	}
	l.st.Previous = nil
	if ok, err := intact(prev); !ok {
		l.cfg.Log.Error("the kept release crash-loops, and the release before it cannot be run to go back to",
			"version", l.st.KnownGood, "previous", prev.Version, "path", prev.Path, "err", err)
		if err := l.save(); err != nil {
			l.cfg.Log.Error("writing launcher.json", "err", err)
		}
		l.stMu.Unlock()
		return false
	}
	from := pending{Version: l.st.KnownGood, Path: l.st.KnownGoodPath, Digest: l.st.KnownGoodDigest}
	rb := rollback{From: from.Version, To: prev.Version, Digest: from.Digest, At: time.Now().UTC(),
		Reason: fmt.Sprintf("it was kept after its trial, then its host exited %d times in a row, each within a minute of starting or stopped for not getting through its start (the last: %s)",
			n, last)}
	// A rollback no host has reported yet (the kept release died before
	// it could: a trial of another release failed, and left what it
	// cannot start on) is carried in this record, not written over: the
	// host started next refuses that release too, and says so.
	var before rollback
	if l.unwritten != nil {
		before, l.unwritten = *l.unwritten, nil
	} else if readJSON(rollbackPath(l.cfg.StateDir), &before) != nil {
		before = rollback{}
	}
	cr := &crashRollback{From: keptRelease{Version: from.Version, Path: from.Path, Digest: from.Digest}}
	if before.Digest != "" && before.Digest != rb.Digest {
		rb.Also = append(slices.Clone(before.Also), before.Digest)
		rb.Reason += "; before that, " + models.RolledBackReason(before.From, before.To, before.Reason)
		cr.Before = &before
	}
	l.st.KnownGood, l.st.KnownGoodPath, l.st.KnownGoodDigest = prev.Version, prev.Path, prev.Digest
	l.st.CrashRolledBack = cr
	if from.Version == version.Version {
		// The launcher moved to the release rolled back: it follows the
		// host back (retryLauncher, once the host put back runs), so the
		// stable path and the launcher's own image, which stands in for
		// a damaged known-good, are not a release known to fail.
		l.st.LauncherRetry = &launcherTrial{Version: prev.Version, Path: prev.Path, Digest: prev.Digest}
	}
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
	// Recorded before the state is let go: the launcher's own trial,
	// ending now, re-executes as soon as it may, and the image after it
	// must find the record.
	l.record(rb)
	l.stMu.Unlock()
	return true
}

// crashRollbackStands forgets how to withdraw a crash rollback: the host
// put back ran a minute in one go.
func (l *launcher) crashRollbackStands() {
	l.stMu.Lock()
	defer l.stMu.Unlock()
	if l.st.CrashRolledBack == nil {
		return
	}
	l.st.CrashRolledBack = nil
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
}

// withdrawCrashRollback undoes a crash rollback whose release put back
// crash-loops as well: the machine is at fault (a state dir it cannot
// read, a root gone), and an older release does not mend it. Known-good
// is the release left again, and the rollback's record, which no host has
// reported yet, is taken back (the one it carried put back in its place),
// so the release is not refused here nor failed fleet-wide for one
// machine's trouble. False when there is nothing to withdraw, or a host
// has reported it already (then it stands).
func (l *launcher) withdrawCrashRollback() bool {
	l.stMu.Lock()
	defer l.stMu.Unlock()
	cr := l.st.CrashRolledBack
	if cr == nil {
		return false
	}
	l.st.CrashRolledBack = nil
	var rb rollback
	switch {
	case l.unwritten != nil:
		// Handed to each host in its environment: a host may have
		// reported it (it cannot say so), and then it stands.
		if err := l.save(); err != nil {
			l.cfg.Log.Error("writing launcher.json", "err", err)
		}
		return false
	case readJSON(rollbackPath(l.cfg.StateDir), &rb) == nil && rb.Digest == cr.From.Digest:
		var err error
		if cr.Before != nil {
			err = writeJSONAtomic(rollbackPath(l.cfg.StateDir), *cr.Before, 0o600)
		} else if err = os.Remove(rollbackPath(l.cfg.StateDir)); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		if err != nil {
			l.cfg.Log.Error("the crash rollback's record cannot be taken back; it stands", "err", err)
			if err := l.save(); err != nil {
				l.cfg.Log.Error("writing launcher.json", "err", err)
			}
			return false
		}
	default:
		// Reported (a host that reported it removes the record, or
		// renames it rollback.reported.json until it has saved the
		// refusal): the controller heard it, and it stands.
		if err := l.save(); err != nil {
			l.cfg.Log.Error("writing launcher.json", "err", err)
		}
		return false
	}
	l.cfg.Log.Warn("the release put back crash-loops as well: the machine is at fault, not the release; the crash rollback is withdrawn",
		"put_back", l.st.KnownGood, "known_good", cr.From.Version)
	// The release put back stays the one to go back to: once the machine
	// is mended, a release that still crash-loops is rolled back then.
	back := &keptRelease{Version: l.st.KnownGood, Path: l.st.KnownGoodPath, Digest: l.st.KnownGoodDigest}
	l.st.KnownGood, l.st.KnownGoodPath, l.st.KnownGoodDigest, l.st.Previous = cr.From.Version, cr.From.Path, cr.From.Digest, back
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
	return true
}

// intact says whether a kept release's binary can be run: it matches its
// digest (the binary installed first has none recorded: it exists).
func intact(r *keptRelease) (bool, error) {
	if r.Digest != "" {
		ok, err := fileHasDigest(r.Path, r.Digest)
		if err == nil && !ok {
			err = fmt.Errorf("%s is missing or does not match its digest", r.Path)
		}
		return ok, err
	}
	if _, err := os.Stat(r.Path); err != nil {
		return false, err
	}
	return true, nil
}

// tryRelease runs a staged release on trial; it becomes known-good only if
// it completes a reconcile before the deadline. A release kept whose host
// still runs, the launcher not moved to it, is returned for the loop to
// supervise.
func (l *launcher) tryRelease(ctx context.Context) (*child, error) {
	var pd pending
	if err := readJSON(pendingPath(l.cfg.StateDir), &pd); err != nil {
		l.cfg.Log.Error("the host asked for a hand-over but staged nothing", "err", err)
		return nil, nil
	}
	_ = os.Remove(pendingPath(l.cfg.StateDir))
	if ok, _ := fileHasDigest(pd.Path, pd.Digest); !ok {
		return nil, l.rollBack(pd, "the staged binary does not match its digest")
	}
	if v, ok := l.stagedVersion(pd.Path); ok && v != pd.Version {
		// A binary published under another version's name (an upload of
		// the wrong file): on trial it would see its release named and
		// stage it again, exiting, and the rollback would say only that.
		return nil, l.rollBack(pd, fmt.Sprintf("its binary is mesh-host %s, not %s: the release was published with another version's binary", v, pd.Version))
	}
	marker := markerPath(l.cfg.StateDir, pd.Version)
	_ = os.Remove(marker)
	l.stMu.Lock()
	from := l.st.KnownGood
	l.stMu.Unlock()
	p, exited, err := l.start(pd.Path, EnvTrialVersion+"="+pd.Version, EnvTrialFrom+"="+from,
		EnvTrialDeadline+"="+strconv.Itoa(int(l.cfg.TrialDeadline/time.Second)))
	if err != nil {
		return nil, l.rollBack(pd, "could not start: "+err.Error())
	}
	// Its trial judges it by a whole reconcile; that it says it got
	// through its start is noted for its later starts (awaitReady).
	l.setOnTrial(true)
	defer l.setOnTrial(false)
	l.cfg.Log.Info("release on trial", "version", pd.Version, "pid", p.Pid, "deadline", l.cfg.TrialDeadline)
	deadline := time.NewTimer(l.cfg.TrialDeadline)
	defer deadline.Stop()
	look := l.look
	if look == 0 {
		look = 100 * time.Millisecond
	}
	tick := time.NewTicker(look)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			stop(p, exited)
			return nil, nil
		case ws := <-exited:
			if _, err := os.Stat(marker); err == nil {
				// It completed its reconcile (the controller accepted its
				// upgraded report, then it wrote the marker) and exited
				// before this looked: known-good, and started again as
				// such by the loop. Rolled back, the host would refuse a
				// release its controller has recorded it as running.
				_ = os.Remove(marker)
				if err := l.keep(pd); err != nil {
					return nil, err
				}
				l.cfg.Log.Warn("release is known-good; it exited after its reconcile, starting it again", "version", pd.Version, "status", ws)
				return nil, nil
			}
			var next pending
			verdict, failed := trialVerdict(l.cfg.StateDir, pd.Version)
			if !failed && ws.Exited() && ws.ExitStatus() == ExitUpgrade && readJSON(pendingPath(l.cfg.StateDir), &next) == nil && next.Version != pd.Version {
				// Its declaration named another release before its
				// verdict: the controller moved the machine on (its
				// rollout halted elsewhere or was cancelled, and the
				// target went back) without failing its trial. Nothing
				// was learnt of this release, so it is not refused: the
				// known-good host starts again and follows its
				// declaration from there.
				_ = os.Remove(pendingPath(l.cfg.StateDir))
				l.cfg.Log.Warn("release on trial handed over before its verdict; back to known-good, the release not refused",
					"version", pd.Version, "asked_for", next.Version)
				return nil, nil
			}
			if failed {
				return nil, l.rollBack(pd, verdict)
			}
			return nil, l.rollBack(pd, fmt.Sprintf("it exited before completing a reconcile (%s)", describeExit(ws)))
		case <-deadline.C:
			// The marker is looked for once more: written since the last
			// tick, the trial completed its reconcile (its upgraded report
			// accepted) and is kept; rolled back, it would run the release
			// the controller has recorded it as leaving.
			if _, err := os.Stat(marker); err != nil {
				stop(p, exited)
				if verdict, failed := trialVerdict(l.cfg.StateDir, pd.Version); failed {
					return nil, l.rollBack(pd, verdict)
				}
				return nil, l.rollBack(pd, fmt.Sprintf("it did not complete a reconcile within %s", l.cfg.TrialDeadline))
			}
		case <-tick.C:
			if _, err := os.Stat(marker); err != nil {
				continue
			}
			_ = os.Remove(marker)
			if err := l.keep(pd); err != nil {
				return nil, err
			}
			l.cfg.Log.Info("release is known-good", "version", pd.Version)
			l.setOnTrial(false)
			// The launcher follows the host it keeps: it re-executes in
			// place as that release (no return when it does).
			l.moveTo(ctx, pd, p.Pid)
			// Not moved: the loop supervises it as the known-good host.
			return &child{p: p, exited: exited}, nil
		}
	}
}

// trialVerdict reads (and removes) the note a trial host leaves when the
// controller refused its upgraded report: the rollback's reason then says
// the controller's words (its poll advertised other schemas than the
// release records, it missed the rollout's deadline), where it said only
// how the host exited, the cause left on the release's record alone.
func trialVerdict(dir, v string) (string, bool) {
	b, err := os.ReadFile(trialRefusedPath(dir, v))
	if err != nil {
		return "", false
	}
	_ = os.Remove(trialRefusedPath(dir, v))
	words := strings.TrimSpace(string(b))
	if len(words) > 300 {
		words = words[:300] + "…"
	}
	if words == "" {
		return "the controller failed its trial", true
	}
	return "the controller failed its trial: " + words, true
}

// stagedVersion asks a staged binary its version (mesh-host version);
// ok is false when it does not answer as a mesh-host does, which its trial
// then judges.
func (l *launcher) stagedVersion(path string) (string, bool) {
	out, err := l.ask(path, "version")
	if err != nil {
		return "", false
	}
	// "mesh-host VERSION (build BUILD)", as version.String says it.
	line, _, _ := strings.Cut(string(out), "\n")
	rest, ok := strings.CutPrefix(line, "mesh-host ")
	i := strings.LastIndex(rest, " (build ")
	if !ok || i <= 0 || !strings.HasSuffix(rest, ")") {
		return "", false
	}
	return rest[:i], true
}

// keep makes a release that completed its reconcile known-good.
func (l *launcher) keep(pd pending) error {
	l.stMu.Lock()
	defer l.stMu.Unlock()
	if l.st.KnownGood != pd.Version {
		l.st.Previous = &keptRelease{Version: l.st.KnownGood, Path: l.st.KnownGoodPath, Digest: l.st.KnownGoodDigest}
	}
	l.st.KnownGood, l.st.KnownGoodPath, l.st.KnownGoodDigest = pd.Version, pd.Path, pd.Digest
	l.st.CrashRolledBack = nil
	return l.save()
}

// rollBack puts known-good back and records why, for the restored host to
// report (rolled_back) and to refuse the release from then on. A record
// that cannot be written (a full state dir) does not keep known-good from
// starting: it is kept in memory, written at the next start of known-good
// that can, and handed to the host in its environment meanwhile.
func (l *launcher) rollBack(pd pending, reason string) error {
	l.stMu.Lock()
	to := l.st.KnownGood
	l.stMu.Unlock()
	l.record(rollback{From: pd.Version, To: to, Digest: pd.Digest, Reason: reason, At: time.Now().UTC()})
	return nil
}

// record writes a rollback's record for the host started next; one that
// cannot be written is held in memory (unwritten) and handed to it in its
// environment.
func (l *launcher) record(rb rollback) {
	l.cfg.Log.Warn("rolling back", "from", rb.From, "to", rb.To, "reason", rb.Reason)
	if err := writeJSONAtomic(rollbackPath(l.cfg.StateDir), rb, 0o600); err != nil {
		l.cfg.Log.Error("the rollback's record could not be written; known-good is started and told of it in its environment",
			"from", rb.From, "err", err)
		l.unwritten = &rb
	}
}

// stop ends a host: SIGTERM, then SIGKILL after ten seconds.
func stop(p *os.Process, exited chan syscall.WaitStatus) { stopped(p, exited) }

// stopped is stop, saying how the host ended.
func stopped(p *os.Process, exited chan syscall.WaitStatus) syscall.WaitStatus {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case ws := <-exited:
		return ws
	case <-time.After(10 * time.Second):
		_ = p.Kill()
		return <-exited
	}
}

// readyLimit is how long a watched host has to get through its start.
func (l *launcher) readyLimit() time.Duration { return cmp.Or(l.readyIn, readyWithin) }

func describeExit(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprint(ws)
}
