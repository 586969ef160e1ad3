package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
}

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
	mu    sync.Mutex // guards exits

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
	ch := make(chan syscall.WaitStatus, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	p, err := os.StartProcess(path, append([]string{path, "run"}, l.cfg.RunArgs...), &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Env:   append(append(os.Environ(), EnvLauncher+"=1"), env...),
	})
	if err != nil {
		return nil, nil, err
	}
	l.exits[p.Pid] = ch
	l.recordHost(p.Pid)
	return p, ch, nil
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
// before it re-executed itself) or started here.
func (l *launcher) loop(ctx context.Context, adopted *child) error {
	backoff := time.Second
	for {
		var p *os.Process
		var exited chan syscall.WaitStatus
		if adopted != nil {
			p, exited, adopted = adopted.p, adopted.exited, nil
		} else {
			l.stMu.Lock()
			path, v := l.st.KnownGoodPath, l.st.KnownGood
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
			var err error
			p, exited, err = l.start(path, env...)
			if err != nil {
				return fmt.Errorf("starting known-good %s: %w", path, err)
			}
			l.cfg.Log.Info("launched", "version", v, "pid", p.Pid)
		}
		started := time.Now()
		var ws syscall.WaitStatus
		select {
		case <-ctx.Done():
			stop(p, exited)
			return nil
		case ws = <-exited:
		}
		if ws.Exited() && ws.ExitStatus() == ExitUpgrade {
			if err := l.tryRelease(ctx); err != nil {
				return err
			}
			backoff = time.Second
			continue
		}
		if time.Since(started) > time.Minute {
			backoff = time.Second
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

// tryRelease runs a staged release on trial; it becomes known-good only if
// it completes a reconcile before the deadline.
func (l *launcher) tryRelease(ctx context.Context) error {
	var pd pending
	if err := readJSON(pendingPath(l.cfg.StateDir), &pd); err != nil {
		l.cfg.Log.Error("the host asked for a hand-over but staged nothing", "err", err)
		return nil
	}
	_ = os.Remove(pendingPath(l.cfg.StateDir))
	if ok, _ := fileHasDigest(pd.Path, pd.Digest); !ok {
		return l.rollBack(pd, "the staged binary does not match its digest")
	}
	if v, ok := l.stagedVersion(pd.Path); ok && v != pd.Version {
		// A binary published under another version's name (an upload of
		// the wrong file): on trial it would see its release named and
		// stage it again, exiting, and the rollback would say only that.
		return l.rollBack(pd, fmt.Sprintf("its binary is mesh-host %s, not %s: the release was published with another version's binary", v, pd.Version))
	}
	marker := markerPath(l.cfg.StateDir, pd.Version)
	_ = os.Remove(marker)
	l.stMu.Lock()
	from := l.st.KnownGood
	l.stMu.Unlock()
	p, exited, err := l.start(pd.Path, EnvTrialVersion+"="+pd.Version, EnvTrialFrom+"="+from,
		EnvTrialDeadline+"="+strconv.Itoa(int(l.cfg.TrialDeadline/time.Second)))
	if err != nil {
		return l.rollBack(pd, "could not start: "+err.Error())
	}
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
			return nil
		case ws := <-exited:
			if _, err := os.Stat(marker); err == nil {
				// It completed its reconcile (the controller accepted its
				// upgraded report, then it wrote the marker) and exited
				// before this looked: known-good, and started again as
				// such by the loop. Rolled back, the host would refuse a
				// release its controller has recorded it as running.
				_ = os.Remove(marker)
				if err := l.keep(pd); err != nil {
					return err
				}
				l.cfg.Log.Warn("release is known-good; it exited after its reconcile, starting it again", "version", pd.Version, "status", ws)
				return nil
			}
			var next pending
			_, failed := os.Stat(trialRefusedPath(l.cfg.StateDir, pd.Version))
			_ = os.Remove(trialRefusedPath(l.cfg.StateDir, pd.Version))
			if failed != nil && ws.Exited() && ws.ExitStatus() == ExitUpgrade && readJSON(pendingPath(l.cfg.StateDir), &next) == nil && next.Version != pd.Version {
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
				return nil
			}
			return l.rollBack(pd, fmt.Sprintf("it exited before completing a reconcile (%s)", describeExit(ws)))
		case <-deadline.C:
			// The marker is looked for once more: written since the last
			// tick, the trial completed its reconcile (its upgraded report
			// accepted) and is kept; rolled back, it would run the release
			// the controller has recorded it as leaving.
			if _, err := os.Stat(marker); err != nil {
				stop(p, exited)
				return l.rollBack(pd, fmt.Sprintf("it did not complete a reconcile within %s", l.cfg.TrialDeadline))
			}
		case <-tick.C:
			if _, err := os.Stat(marker); err != nil {
				continue
			}
			_ = os.Remove(marker)
			if err := l.keep(pd); err != nil {
				return err
			}
			l.cfg.Log.Info("release is known-good", "version", pd.Version)
			l.setOnTrial(false)
			// The launcher follows the host it keeps: it re-executes in
			// place as that release (no return when it does).
			l.moveTo(ctx, pd, p.Pid)
			// Supervise it as the known-good host from here.
			select {
			case <-ctx.Done():
				stop(p, exited)
				return nil
			case ws := <-exited:
				if ws.Exited() && ws.ExitStatus() == ExitUpgrade {
					return l.tryRelease(ctx)
				}
				l.cfg.Log.Warn("host exited; starting it again", "status", ws)
				return nil
			}
		}
	}
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
	l.st.KnownGood, l.st.KnownGoodPath, l.st.KnownGoodDigest = pd.Version, pd.Path, pd.Digest
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
	l.cfg.Log.Warn("rolling back", "from", pd.Version, "to", to, "reason", reason)
	rb := rollback{From: pd.Version, To: to, Digest: pd.Digest, Reason: reason, At: time.Now().UTC()}
	if err := writeJSONAtomic(rollbackPath(l.cfg.StateDir), rb, 0o600); err != nil {
		l.cfg.Log.Error("the rollback's record could not be written; known-good is started and told of it in its environment",
			"from", pd.Version, "err", err)
		l.unwritten = &rb
	}
	return nil
}

// stop ends a host: SIGTERM, then SIGKILL after ten seconds.
func stop(p *os.Process, exited chan syscall.WaitStatus) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = p.Kill()
		<-exited
	}
}

func describeExit(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprint(ws)
}
