package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"mesh/models"
	"mesh/version"
)

// The launcher moves to a host release once that release has won its
// trial: it re-executes in place as the release's binary, so its process id
// and its children (the host it runs, the services orphaned to it) stay, and
// a service manager and running services notice nothing. The service
// manager starts a stable path, <state>/bin/mesh-host, a symlink flipped to
// the new launcher only once that launcher has completed a trial of its own;
// until then a restart of the service (or of the machine) runs the launcher
// before it. See DESIGN.md, "Host upgrades".

// EnvLauncherHost is how a launcher re-executing itself hands the host it
// runs to the launcher it becomes: the host's process id.
const EnvLauncherHost = "MESH_LAUNCHER_HOST_PID"

// LauncherHandover is what `mesh-host version --launcher-handover` prints
// (with a newline): a release whose binary says it can adopt the host a
// launcher hands over in EnvLauncherHost. A launcher moves only to such a
// release: an older one would ignore the hand-over and start a second host
// beside the first.
const LauncherHandover = "mesh-host launcher handover 1"

// StablePath is the path the service manager starts (the unit's ExecStart):
// a symlink to the launcher binary that last completed its trial.
func StablePath(stateDir string) string { return filepath.Join(stateDir, "bin", "mesh-host") }

func launcherMarkerPath(dir, v string) string {
	return filepath.Join(dir, "launcher-reconciled-"+v)
}

// launcherTrial is a launcher re-executed into a release, not yet proven.
type launcherTrial struct {
	Version string `json:"version"`
	Path    string `json:"path"`
	Digest  string `json:"digest"`
	// From and FromPath are the launcher it replaced, which the stable path
	// names until the trial completes, and which a failed trial goes back to.
	From     string    `json:"from"`
	FromPath string    `json:"from_path"`
	Started  time.Time `json:"started"`
	// Boot is the machine's boot id when the trial started: a stable path
	// started again under another boot id was the machine restarting,
	// not the launcher on trial failing.
	Boot string `json:"boot,omitempty"`
}

// launcherRetries is how many times a launcher trial interrupted by the
// machine's restart is tried again before it is refused.
const launcherRetries = 2

// bootIDPath is where the kernel says this boot's id.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootID is this boot's id ("" if it cannot be read).
func bootID() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// EnsureStablePath makes the stable path name target when it names
// nothing yet (enrolment, or a launcher from before the stable path); it
// never moves an existing one.
func EnsureStablePath(stateDir, target string) error {
	if _, err := os.Lstat(StablePath(stateDir)); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(StablePath(stateDir)), 0o755); err != nil {
		return err
	}
	return flipStable(stateDir, target)
}

// flipStable points the stable path at target: a new symlink renamed over
// the old, so the path names one launcher or the other, never none.
func flipStable(stateDir, target string) error {
	link := StablePath(stateDir)
	tmp := filepath.Join(filepath.Dir(link), ".mesh-host.new")
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(link))
}

// stableTarget is the launcher binary the stable path names ("" if none).
func stableTarget(stateDir string) string {
	t, err := os.Readlink(StablePath(stateDir))
	if err != nil {
		return ""
	}
	return t
}

// child is a host process the launcher supervises.
type child struct {
	p      *os.Process
	exited chan syscall.WaitStatus
}

// adoptHost takes the host a launcher ran before it re-executed itself (its
// pid in EnvLauncherHost), if that process is still this one's child; the
// reaper then reports its exit as for a host started here. Nil on a fresh
// start, or when the host exited during the re-exec (a new one is started).
func (l *launcher) adoptHost() *child {
	s := os.Getenv(EnvLauncherHost)
	if s == "" {
		return nil
	}
	l.reexeced = true
	// Hosts started from here on must not see it.
	os.Unsetenv(EnvLauncherHost)
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 || parentOf(pid) != os.Getpid() {
		l.cfg.Log.Warn("the host handed over is gone; starting known-good", "pid", s)
		return nil
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	ch := make(chan syscall.WaitStatus, 1)
	l.mu.Lock()
	l.exits[pid] = ch
	l.mu.Unlock()
	l.cfg.Log.Info("adopted the running host", "pid", pid, "version", l.st.KnownGood)
	return &child{p: p, exited: ch}
}

// parentOf is a process's parent pid (0 if it cannot be read, or it is a
// zombie: a host that exited is not adopted).
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || f[0] == "Z" {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// startUp settles launcher.json as this process starts: it records the
// launcher running, makes the stable path exist, and judges a launcher trial
// it finds. Re-executed into a release on trial, it keeps the trial running
// (launcherTrial ends it). Started afresh with a trial recorded, the trial
// ended without completing: the service manager started the stable path
// again (the launcher on trial exited, or the machine restarted), so that
// release's launcher is refused. A host left running by a launcher that died
// is stopped: it is nobody's child now, and a second host must not run
// beside it.
func (l *launcher) startUp() error {
	l.stMu.Lock()
	defer l.stMu.Unlock()
	if err := EnsureStablePath(l.cfg.StateDir, l.self); err != nil {
		l.cfg.Log.Warn("cannot make the stable path", "path", StablePath(l.cfg.StateDir), "err", err)
	}
	prev := l.st.Launcher
	l.st.Launcher = version.Version
	if t := l.st.LauncherTrial; t != nil {
		switch {
		case l.reexeced && t.Version == version.Version:
			l.cfg.Log.Info("launcher re-executed in place; on trial", "from", t.From, "to", t.Version, "pid", os.Getpid(), "deadline", l.cfg.TrialDeadline)
		case stableTarget(l.cfg.StateDir) == t.Path:
			// Flipped, and stopped before it said so.
			l.st.LauncherTrial = nil
		case t.Boot != "" && t.Boot != bootID() && l.st.LauncherInterrupted[t.Digest] < launcherRetries:
			// The machine restarted during the trial: nothing was learnt
			// of the launcher, so it is tried again once the known-good
			// host runs (retryLauncher), not refused for good.
			if l.st.LauncherInterrupted == nil {
				l.st.LauncherInterrupted = map[string]int{}
			}
			l.st.LauncherInterrupted[t.Digest]++
			l.cfg.Log.Warn("the machine restarted during a launcher trial; trying that launcher again",
				"version", t.Version, "interrupted", l.st.LauncherInterrupted[t.Digest], "of", launcherRetries)
			l.st.LauncherRetry, l.st.LauncherTrial = t, nil
			_ = os.Remove(launcherMarkerPath(l.cfg.StateDir, t.Version))
		default:
			why := "the stable path was started again during it"
			if t.Boot != "" && t.Boot != bootID() {
				why = fmt.Sprintf("the machine restarted during it %d times", launcherRetries+1)
			}
			l.failLauncherTrial(fmt.Sprintf("launcher %s did not complete its trial: %s, naming %s (%s)",
				t.Version, why, t.FromPath, t.From))
		}
	} else if l.reexeced && prev != "" && prev != version.Version {
		l.cfg.Log.Info("launcher re-executed in place", "from", prev, "to", version.Version, "pid", os.Getpid())
	}
	if !l.reexeced && l.st.HostPID > 0 && alive(pidRecord{PID: l.st.HostPID, StartTime: l.st.HostStart}) && parentOf(l.st.HostPID) != os.Getpid() {
		l.cfg.Log.Warn("a host from before this launcher still runs; stopping it", "pid", l.st.HostPID)
		stopStray(l.st.HostPID, l.st.HostStart)
	}
	// A host launcher.json does not name (the file lost, or a host run
	// by hand) is known by the lock it holds on the state dir.
	if rec, held := heldHost(l.cfg.StateDir); held && !l.reexeced && rec.PID != os.Getpid() && parentOf(rec.PID) != os.Getpid() {
		l.cfg.Log.Warn("a host this launcher did not start runs on its state dir; stopping it", "pid", rec.PID)
		stopStray(rec.PID, rec.StartTime)
	}
	return l.save()
}

// stopStray ends a process that is not this one's child: SIGTERM, then
// SIGKILL after ten seconds; it waits until the process is gone.
func stopStray(pid int, start uint64) {
	rec := pidRecord{PID: pid, StartTime: start}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for alive(rec) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(time.Hour)
		}
		time.Sleep(50 * time.Millisecond) // polling a process that is not ours to wait for
	}
}

// failLauncherTrial records why a launcher trial failed and refuses that
// release's launcher; the caller holds stMu and saves.
func (l *launcher) failLauncherTrial(why string) {
	t := l.st.LauncherTrial
	l.cfg.Log.Warn("launcher trial failed", "version", t.Version, "reason", why)
	// On the host's record, beside the host's own trials: the release's
	// launcher is refused from now on, though its host may run it.
	_ = appendJournal(l.cfg.StateDir, Entry{Time: time.Now().UTC(), Digest: t.Digest, Outcome: models.OutcomeRefused,
		Reason: "launcher " + t.Version + " refused, the launcher before it kept: " + why})
	l.st.LauncherFailure = why
	if t.Digest != "" && !slices.Contains(l.st.LauncherRefused, t.Digest) {
		l.st.LauncherRefused = append(l.st.LauncherRefused, t.Digest)
	}
	l.st.LauncherTrial = nil
	_ = os.Remove(launcherMarkerPath(l.cfg.StateDir, t.Version))
}

func (l *launcher) setOnTrial(b bool) {
	l.stMu.Lock()
	l.onTrial = b
	l.stMu.Unlock()
}

// moveTo re-executes this launcher in place as the release pd, which has
// just won its trial as the host, handing over the host hostPID. It returns
// only when it does not move: the launcher is being stopped, it is that
// release already, its launcher failed a trial before, or the exec failed
// (then the launcher carries on as it is, and the stable path is untouched).
// A launcher told to stop never re-executes: the new image would not know
// it had been told, and would run on.
func (l *launcher) moveTo(ctx context.Context, pd pending, hostPID int) {
	l.stMu.Lock()
	if ctx.Err() != nil || pd.Version == version.Version || slices.Contains(l.st.LauncherRefused, pd.Digest) {
		l.stMu.Unlock()
		return
	}
	l.stMu.Unlock()
	probe := l.probe
	if probe == nil {
		probe = l.probeHandover
	}
	if err := probe(pd.Path); err != nil {
		l.cfg.Log.Warn("the launcher stays: the release cannot take a running host over", "release", pd.Version, "launcher", version.Version, "err", err)
		return
	}
	l.stMu.Lock()
	from, fromPath := version.Version, stableTarget(l.cfg.StateDir)
	if t := l.st.LauncherTrial; t != nil {
		// Moving on from a launcher still on trial: the stable path names
		// the one before it still, and a failure goes back there.
		from, fromPath = t.From, t.FromPath
	}
	if fromPath == "" {
		fromPath = l.self
	}
	l.st.LauncherTrial = &launcherTrial{Version: pd.Version, Path: pd.Path, Digest: pd.Digest, From: from, FromPath: fromPath,
		Started: time.Now().UTC(), Boot: bootID()}
	_ = os.Remove(launcherMarkerPath(l.cfg.StateDir, pd.Version))
	if err := l.save(); err != nil {
		l.st.LauncherTrial = nil
		l.stMu.Unlock()
		l.cfg.Log.Error("not moving the launcher: writing launcher.json", "err", err)
		return
	}
	l.stMu.Unlock()
	l.cfg.Log.Info("launcher moving to the release in place", "from", version.Version, "to", pd.Version, "pid", os.Getpid(), "host", hostPID)
	err := l.reexec(ctx, pd.Path, hostPID)
	if ctx.Err() != nil {
		// Told to stop meanwhile: no trial, nothing refused.
		l.stMu.Lock()
		defer l.stMu.Unlock()
		l.st.LauncherTrial = nil
		if err := l.save(); err != nil {
			l.cfg.Log.Error("writing launcher.json", "err", err)
		}
		return
	}
	// Still here: the exec failed, and this launcher carries on.
	l.stMu.Lock()
	defer l.stMu.Unlock()
	if l.st.LauncherTrial != nil {
		l.failLauncherTrial(fmt.Sprintf("launcher %s could not start: %v", pd.Version, err))
	}
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
}

// retryLauncher tries again a launcher trial the machine's restart
// interrupted, or moves the launcher back with a crash rollback, now that
// the known-good host hostPID runs: the release's launcher is moved to as
// after its host's trial (moveTo). Only the release known-good is: a later
// one kept meanwhile brings its own.
func (l *launcher) retryLauncher(ctx context.Context, hostPID int) {
	l.stMu.Lock()
	r := l.st.LauncherRetry
	if r == nil {
		l.stMu.Unlock()
		return
	}
	l.st.LauncherRetry = nil
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
	kg := pending{Version: l.st.KnownGood, Path: l.st.KnownGoodPath, Digest: l.st.KnownGoodDigest}
	l.stMu.Unlock()
	if kg.Version != r.Version || kg.Digest != r.Digest {
		return
	}
	l.moveTo(ctx, kg, hostPID)
}

// probeHandover asks a release's binary whether its launcher adopts a
// handed-over host. A binary from before the hand-over refuses the flag
// (and says nothing else), so it is never exec'd as a launcher. The probe
// is started like a host, so that its exit reaches this launcher through
// the reaper (which waits for every child: an exec.Cmd's own wait would
// race it and lose).
func (l *launcher) probeHandover(path string) error {
	b, err := l.ask(path, "version", "--launcher-handover")
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(b)); got != LauncherHandover {
		return fmt.Errorf("%s version --launcher-handover said %q, not %q", path, got, LauncherHandover)
	}
	return nil
}

// ask runs path with args and returns what it printed (4 KiB at most),
// an error unless it exited 0 within 10 s. Its exit comes through the
// launcher's reaper, which waits for every child.
func (l *launcher) ask(path string, args ...string) ([]byte, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	ch := make(chan syscall.WaitStatus, 1)
	l.mu.Lock()
	p, err := os.StartProcess(path, append([]string{path}, args...), &os.ProcAttr{Files: []*os.File{nil, w, os.Stderr}})
	if err == nil {
		l.exits[p.Pid] = ch
	}
	l.mu.Unlock()
	w.Close()
	if err != nil {
		return nil, err
	}
	said := path + " " + strings.Join(args, " ")
	out := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(io.LimitReader(r, 4096)); out <- b }()
	var ws syscall.WaitStatus
	select {
	case ws = <-ch:
	case <-time.After(10 * time.Second):
		_ = p.Kill()
		return nil, fmt.Errorf("%s did not answer within 10s", said)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return nil, fmt.Errorf("%s: %s", said, describeExit(ws))
	}
	var b []byte
	select {
	case b = <-out:
	case <-time.After(time.Second):
	}
	return b, nil
}

// reexec replaces this process with path's launcher, same arguments, the
// host's pid in the environment. It does not when the launcher has been
// told to stop (the signal was taken by this image; the next would not
// see it and would run on).
func (l *launcher) reexec(ctx context.Context, path string, hostPID int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("not re-executing: the launcher is stopping")
	}
	env := append(slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, EnvLauncherHost+"=") }),
		EnvLauncherHost+"="+strconv.Itoa(hostPID))
	argv := append([]string{path}, l.cfg.Args...)
	run := l.exec
	if run == nil {
		run = unix.Exec
	}
	return run(path, argv, env)
}

// launcherTrial watches a launcher on trial (this one, re-executed): it
// completes once the host it runs has reached the controller again with
// this launcher in place (the host leaves launcher-reconciled-<version>),
// and the stable path is flipped to it. Without that by the trial deadline,
// the launcher re-executes the one before it, which the stable path still
// names, and this release's launcher is refused.
func (l *launcher) launcherTrial(ctx context.Context) {
	l.stMu.Lock()
	t := l.st.LauncherTrial
	l.stMu.Unlock()
	if t == nil || t.Version != version.Version {
		return
	}
	deadline := time.NewTimer(l.cfg.TrialDeadline)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := os.Stat(launcherMarkerPath(l.cfg.StateDir, t.Version)); err != nil {
				continue
			}
			l.stMu.Lock()
			err := flipStable(l.cfg.StateDir, t.Path)
			if err == nil {
				l.st.LauncherTrial, l.st.LauncherFailure = nil, ""
				delete(l.st.LauncherInterrupted, t.Digest)
				err = l.save()
			}
			l.stMu.Unlock()
			if err != nil {
				l.cfg.Log.Error("flipping the stable path", "err", err)
				continue
			}
			_ = os.Remove(launcherMarkerPath(l.cfg.StateDir, t.Version))
			l.cfg.Log.Info("launcher is known-good; the stable path names it", "version", t.Version, "path", t.Path)
			return
		case <-deadline.C:
			l.fallBack(ctx, t)
			return
		}
	}
}

// fallBack ends a launcher trial that did not complete: back to the
// launcher the stable path names, re-executed in place with the host.
func (l *launcher) fallBack(ctx context.Context, t *launcherTrial) {
	for {
		l.stMu.Lock()
		if !l.onTrial {
			break
		}
		l.stMu.Unlock()
		// A host release on trial: hand over the known-good host after it.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	l.failLauncherTrial(fmt.Sprintf("launcher %s did not complete its trial within %s: its host did not reach the controller", t.Version, l.cfg.TrialDeadline))
	hostPID := l.st.HostPID
	if err := l.save(); err != nil {
		l.cfg.Log.Error("writing launcher.json", "err", err)
	}
	l.stMu.Unlock()
	l.cfg.Log.Warn("launcher going back", "to", t.From, "path", t.FromPath)
	if err := l.reexec(ctx, t.FromPath, hostPID); err != nil && ctx.Err() == nil {
		l.cfg.Log.Error("cannot go back to the previous launcher; carrying on", "path", t.FromPath, "err", err)
	}
}
