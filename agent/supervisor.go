package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"mesh/models"
)

// services runs the declared services: the host's own supervisor, or
// systemd units.
type services interface {
	// Ensure makes the service run as declared; it says "created",
	// "updated" or "unchanged".
	Ensure(ctx context.Context, r models.Resource, digest string) (string, error)
	// Stop stops and forgets the service.
	Stop(ctx context.Context, id string) error
	// Renewed tells a running service its certificate was renewed: the
	// signal (HUP, USR1, USR2) when one is named, else a restart.
	Renewed(ctx context.Context, id, signal string) error
	// Close stops supervising (the services keep running).
	Close()
}

// strayServices is a services that can name the services it holds a
// record of (a pidfile) that known does not: ones an apply started and
// the host did not live to write into its state.
type strayServices interface {
	Strays(known func(id string) bool) []string
}

// Strays implements strayServices: the services with a pidfile here,
// running or not, that known does not name.
func (s *supervisor) Strays(known func(id string) bool) []string {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".pid"); ok && e.Type().IsRegular() && !known(id) {
			out = append(out, id)
		}
	}
	return out
}

// pidRecord is a service's pidfile: the pid, the process's start time (so
// a recycled pid is never mistaken for it) and the digest it runs.
type pidRecord struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	Digest    string `json:"digest"`
	// Restarts, FirstExit and Why are what the supervisor knew of the
	// service's restarts when it wrote the record (its health): a host
	// started again adopts them with the process, so a service that
	// crash-loops does not read passing for a settle after each host
	// restart (an upgrade, a crash of the host).
	Restarts  int        `json:"restarts,omitempty"`
	FirstExit *time.Time `json:"first_exit,omitempty"`
	Why       string     `json:"why,omitempty"`
}

// supervisor is the host's own service manager. Each service runs in its
// own session with output to a log file under the state dir, so it
// outlives the host's own restarts and upgrades; a restarted host adopts
// it from its pidfile instead of starting a second copy.
type supervisor struct {
	dir   string // state/services
	root  *machineRoot
	log   *slog.Logger
	grace time.Duration

	mu   sync.Mutex
	svcs map[string]*supervised
	// startFailed says, of a service whose start failed and that runs no
	// process (its old version stopped first), why: a failing check of
	// itself. Its state kept it and the host called it running.
	startFailed map[string]string

	// limits bound each service's log (logs.go); onRestart hears of a
	// service started again after it exited (set before any is watched).
	limits    LogLimits
	onRestart func(id string)
	// onExit hears of a service's process found exited (not stopped by
	// this host): its health just turned (set before any is watched).
	onExit func(id string)
	// settle is how long a service the supervisor restarted must stay up
	// before it counts as passing again (restartSettle by default).
	settle time.Duration
	// exitWhy holds how the processes this host started exited (pid →
	// "exit status 1"), for the watch that notices the exit.
	exitWhy sync.Map
	// stopping holds the pids this host is stopping on purpose: their
	// exit (a SIGTERM's 143) is said as a stop, not as a crash.
	stopping sync.Map
	// reaping holds the pids of the processes this host started whose
	// exit their Wait has not noted yet: a look that finds one gone
	// leaves it to noteExit, which knows how it exited (a look would say
	// "not running", and a check read between the two said that).
	reaping sync.Map
	// noted holds, for each process this host started, a channel closed
	// once its exit is noted and its log written: Stop waits for it, so
	// nothing is written of a service after Stop returns.
	noted sync.Map
}

// gone says whether p has exited as far as a look may say: not alive, and
// not a process of this host's whose Wait is yet to say how it exited.
func (s *supervisor) gone(p pidRecord) bool {
	if alive(p) {
		return false
	}
	_, reaping := s.reaping.Load(p.PID)
	return !reaping
}

type supervised struct {
	id     string
	res    models.Resource
	digest string
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	pid pidRecord
	// What its runs came to, for the machine's health (health):
	upSince   time.Time // when its current process was started (or adopted)
	down      bool      // its process exited and is not started again yet
	why       string    // how its process last exited
	restarts  int       // restarts since firstExit; 0 once it stayed up for settle
	firstExit time.Time // the first exit of the restarts counted
	stopped   bool      // Stop took it: its pidfile is not written again
}

// restartSettle is how long a service its supervisor had to restart must
// stay up before it counts as passing again: 30 s, the longest restart
// backoff, so a service that cannot stay up as long as the supervisor
// waits between its starts never looks passing between two crashes, and
// the host's default check interval, so a look between applies (the
// check loop) sees it failing at least once.
const restartSettle = 30 * time.Second

// upMoment is how long a service just started must have run before an
// apply's checks may call it healthy (they wait for it within their
// settle, as for a check that does not pass yet): a service that exits at
// once is seen exited, not reported healthy by a check that looks at
// something else. One second: the supervisor's first restart backoff.
const upMoment = time.Second

// svcHealth is what the supervisor knows of a service's runs.
type svcHealth struct {
	known   bool          // the supervisor runs it
	failing bool          // it exited, and has not stayed up for settle since its restart
	detail  string        // why it fails: "exited: exit status 1; restarted 3 times since 17:02:10"
	up      time.Duration // how long its current process has run
}

// health says whether id exited since its supervisor last found it
// settled: a failing check of that service, from the exit until it has
// stayed up for settle after its restart.
func (s *supervisor) health(id string) svcHealth {
	s.mu.Lock()
	sv := s.svcs[id]
	failed := s.startFailed[id]
	s.mu.Unlock()
	if sv == nil {
		if failed != "" {
			return svcHealth{known: true, failing: true, detail: "not running: its start failed: " + failed}
		}
		return svcHealth{}
	}
	now := time.Now()
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if !sv.down && s.gone(sv.pid) {
		// Exited since the watch last looked: said now, not at its tick.
		sv.exited(s, sv.pid.PID, now)
	}
	s.settled(sv, now)
	h := svcHealth{known: true}
	if !sv.down {
		h.up = now.Sub(sv.upSince)
	}
	if sv.down || sv.restarts > 0 {
		h.failing = true
		h.detail = "exited: " + sv.why
		if sv.restarts > 0 {
			times := "times"
			if sv.restarts == 1 {
				times = "time"
			}
			h.detail += fmt.Sprintf("; restarted %d %s since %s", sv.restarts, times, sv.firstExit.UTC().Format("15:04:05"))
		}
	}
	return h
}

// exited records that sv's process pid exited (sv.mu held); it says
// whether that is news.
func (sv *supervised) exited(s *supervisor, pid int, now time.Time) bool {
	if sv.down || sv.pid.PID != pid {
		return false
	}
	sv.down = true
	sv.why = "not running"
	if w, ok := s.exitWhy.LoadAndDelete(pid); ok {
		sv.why = w.(string)
	}
	if sv.firstExit.IsZero() {
		sv.firstExit = now
	}
	return true
}

// settled forgets sv's restarts once it has stayed up for settle (sv.mu held).
func (s *supervisor) settled(sv *supervised, now time.Time) {
	settle := s.settle
	if settle <= 0 {
		settle = restartSettle
	}
	if !sv.down && now.Sub(sv.upSince) >= settle && sv.restarts > 0 {
		sv.restarts, sv.firstExit = 0, time.Time{}
		sv.pid.Restarts, sv.pid.FirstExit, sv.pid.Why = 0, nil, ""
		if !sv.stopped {
			s.record(sv.id, sv.pid)
		}
	}
}

// record writes a service's pidfile again, with what its health now is.
func (s *supervisor) record(id string, p pidRecord) {
	if err := writeJSONAtomic(s.pidPath(id), p, 0o600); err != nil {
		s.log.Error("writing a service's pidfile", "service", id, "err", err)
	}
}

func newSupervisor(stateDir string, root *machineRoot, log *slog.Logger, grace time.Duration) (*supervisor, error) {
	dir := filepath.Join(stateDir, "services")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &supervisor{dir: dir, root: root, log: log, grace: grace, svcs: map[string]*supervised{}, limits: DefaultLogLimits()}, nil
}

func (s *supervisor) pidPath(id string) string { return filepath.Join(s.dir, id+".pid") }

// LogPath is where a service's output goes.
func (s *supervisor) LogPath(id string) string { return filepath.Join(s.dir, id+".log") }

func (s *supervisor) readPid(id string) (pidRecord, bool) {
	var p pidRecord
	if err := readJSON(s.pidPath(id), &p); err != nil || p.PID <= 0 {
		return p, false
	}
	return p, alive(p)
}

// Ensure implements services.
func (s *supervisor) Ensure(ctx context.Context, r models.Resource, digest string) (string, error) {
	s.mu.Lock()
	sv := s.svcs[r.ID]
	s.mu.Unlock()
	if sv != nil && sv.digest == digest {
		return "unchanged", nil
	}
	action := "created"
	if sv != nil {
		action = "updated"
		if err := s.Stop(ctx, r.ID); err != nil {
			return "", err
		}
	} else if p, ok := s.readPid(r.ID); ok {
		if p.Digest == digest {
			// Adopt what an earlier run of the host started: never two copies.
			s.watch(r, digest, p)
			return "unchanged", nil
		}
		action = "updated"
		if err := s.kill(p); err != nil {
			return "", err
		}
	} else if p.Digest == digest && p.Restarts > 0 && p.FirstExit != nil {
		// It was restarted and had not settled when an earlier run of
		// the host last wrote its pidfile, and it is down now (it exited
		// again while no host watched: most of a crash loop is its
		// backoff). Started again here, it is one restart more, not a
		// service that never failed.
		np, err := s.start(r, digest, pidRecord{Restarts: p.Restarts + 1, FirstExit: p.FirstExit, Why: "exited while no host watched it"})
		if err != nil {
			return "", err
		}
		s.watch(r, digest, np)
		return action, nil
	}
	p, err := s.start(r, digest, pidRecord{})
	if err != nil {
		s.noteStartFailed(r.ID, err)
		return "", err
	}
	s.watch(r, digest, p)
	return action, nil
}

// noteStartFailed remembers why a service that runs no process could not
// be started (cleared when it is watched or stopped).
func (s *supervisor) noteStartFailed(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.startFailed == nil {
		s.startFailed = map[string]string{}
	}
	s.startFailed[id] = err.Error()
}

// start launches the service in its own session. Its pidfile carries what
// carry says of its restarts from the first write: a host stopped just after
// the start finds them there, and no one reads a restart the pidfile lacks.
func (s *supervisor) start(r models.Resource, digest string, carry pidRecord) (pidRecord, error) {
	// What the service wrote while no host watched its size.
	s.rotate(r.ID)
	// O_APPEND: the service's writes land at the end even after the
	// supervisor truncated the file (rotateLog).
	logf, err := os.OpenFile(s.LogPath(r.ID), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return pidRecord{}, err
	}
	defer logf.Close()
	hc, err := s.root.command(r.Command, r.Env)
	if err != nil {
		return pidRecord{}, fmt.Errorf("start %s: %w", r.ID, err)
	}
	cmd := hc.cmd(context.Background())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// Said before the service speaks, so its lines follow it in the log.
	fmt.Fprintf(logf, "--- mesh-host starting %s (%s)\n", r.ID, short(digest))
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(logf, "--- mesh-host: %s did not start: %v\n", r.ID, err)
		return pidRecord{}, fmt.Errorf("start %s: %w", r.ID, err)
	}
	// Its start time is read before it can be reaped: a service that
	// exits at once stays a zombie (its /proc entry kept) until Wait.
	s.reaping.Store(cmd.Process.Pid, true)
	noted := make(chan struct{})
	s.noted.Store(cmd.Process.Pid, noted)
	st, err := startTime(cmd.Process.Pid)
	// Reap it when it exits (while this host is its parent), and say so
	// in its log, so its last lines end with why.
	go func() {
		err := cmd.Wait()
		s.noteExit(r.ID, cmd.Process.Pid, err)
		s.noted.Delete(cmd.Process.Pid)
		close(noted)
	}()
	if err != nil {
		return pidRecord{}, fmt.Errorf("start %s: %w", r.ID, err)
	}
	p := pidRecord{PID: cmd.Process.Pid, StartTime: st, Digest: digest, Restarts: carry.Restarts, FirstExit: carry.FirstExit, Why: carry.Why}
	if err := writeJSONAtomic(s.pidPath(r.ID), p, 0o600); err != nil {
		return p, err
	}
	return p, nil
}

func serviceEnv(root string, env map[string]string) []string {
	out := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "MESH_ROOT=" + root}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// watch keeps a service running: when it exits it is started again, with
// backoff (1 s doubling to 30 s, reset after a minute of running).
func (s *supervisor) watch(r models.Resource, digest string, p pidRecord) {
	// Only a child of this host is waited for, its exit written to its log
	// as it ends (noteExit); one adopted from a host before this one is
	// found gone, and said so here. Looked at before the service is
	// watched: until then a child's exit is kept in exitWhy, after its
	// reaping mark is gone.
	_, child := s.reaping.Load(p.PID)
	if !child {
		_, child = s.exitWhy.Load(p.PID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sv := &supervised{id: r.ID, res: r, digest: digest, cancel: cancel, done: make(chan struct{}), pid: p, upSince: time.Now()}
	if up, ok := runningFor(p.StartTime); ok {
		// Adopted: up since its process started, not since this host
		// found it (a service that stayed up long since its restarts,
		// under a host that wrote no pidfile, has settled).
		sv.upSince = time.Now().Add(-up)
	}
	if p.Restarts > 0 && p.FirstExit != nil {
		// Started again, or adopted from an earlier run of the host,
		// restarted then and not settled yet: counted on.
		sv.restarts, sv.firstExit, sv.why = p.Restarts, *p.FirstExit, p.Why
	}
	s.mu.Lock()
	s.svcs[r.ID] = sv
	delete(s.startFailed, r.ID)
	s.mu.Unlock()
	go func() {
		defer close(sv.done)
		backoff := time.Second
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		startedAt := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s.rotate(r.ID)
			sv.mu.Lock()
			cur := sv.pid
			s.settled(sv, time.Now())
			sv.mu.Unlock()
			if !s.gone(cur) {
				continue
			}
			sv.mu.Lock()
			news := sv.exited(s, cur.PID, time.Now())
			sv.mu.Unlock()
			s.exitWhy.Delete(cur.PID)
			if !child {
				s.noteGone(r.ID, cur.PID)
			}
			if news && s.onExit != nil {
				s.onExit(r.ID)
			}
			if time.Since(startedAt) > time.Minute {
				backoff = time.Second
			}
			s.log.Warn("service exited; restarting", "service", r.ID, "pid", cur.PID, "after", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			sv.mu.Lock()
			first := sv.firstExit
			carry := pidRecord{Restarts: sv.restarts + 1, FirstExit: &first, Why: sv.why}
			sv.mu.Unlock()
			np, err := s.start(r, digest, carry)
			if err != nil {
				s.log.Error("restarting service", "service", r.ID, "err", err)
				continue
			}
			startedAt, child = time.Now(), true
			sv.mu.Lock()
			sv.down, sv.upSince = false, startedAt
			sv.restarts = np.Restarts
			sv.pid = np
			sv.mu.Unlock()
			if s.onRestart != nil {
				s.onRestart(r.ID)
			}
		}
	}()
}

// Stop implements services: SIGTERM to the service's process group, then
// SIGKILL after the grace.
func (s *supervisor) Stop(ctx context.Context, id string) error {
	s.mu.Lock()
	sv := s.svcs[id]
	delete(s.svcs, id)
	delete(s.startFailed, id)
	s.mu.Unlock()
	var p pidRecord
	if sv != nil {
		sv.cancel()
		<-sv.done
		sv.mu.Lock()
		p, sv.stopped = sv.pid, true
		sv.mu.Unlock()
	} else if rec, ok := s.readPid(id); ok {
		p = rec
	}
	if p.PID > 0 {
		s.stopping.Store(p.PID, true)
	}
	if err := s.kill(p); err != nil {
		return err
	}
	if ch, ok := s.noted.Load(p.PID); ok {
		// Its stop said in its log before Stop returns (a process of this
		// host's: kill found it gone once it was a zombie, before its Wait).
		select {
		case <-ch.(chan struct{}):
		case <-time.After(5 * time.Second):
		}
	}
	if err := os.Remove(s.pidPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (s *supervisor) kill(p pidRecord) error {
	if !alive(p) {
		return nil
	}
	_ = syscall.Kill(-p.PID, syscall.SIGTERM)
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(s.grace)
	for time.Now().Before(deadline) {
		if !alive(p) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	for range 100 {
		if !alive(p) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("pid %d survived SIGKILL", p.PID)
}

// Renewed implements services.
func (s *supervisor) Renewed(ctx context.Context, id, signal string) error {
	s.mu.Lock()
	sv := s.svcs[id]
	s.mu.Unlock()
	if sv == nil {
		return fmt.Errorf("service %s is not supervised here", id)
	}
	if signal != "" {
		sig, ok := renewSignal[signal]
		if !ok {
			return fmt.Errorf("signal %s is not one a renewal sends", signal)
		}
		sv.mu.Lock()
		p := sv.pid
		sv.mu.Unlock()
		if !alive(p) {
			return fmt.Errorf("service %s is not running", id)
		}
		return syscall.Kill(p.PID, sig)
	}
	r, digest := sv.res, sv.digest
	if err := s.Stop(ctx, id); err != nil {
		return err
	}
	p, err := s.start(r, digest, pidRecord{})
	if err != nil {
		return err
	}
	s.watch(r, digest, p)
	return nil
}

var renewSignal = map[string]syscall.Signal{"HUP": syscall.SIGHUP, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2}

// Close implements services: stop watching; the services keep running.
func (s *supervisor) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sv := range s.svcs {
		sv.cancel()
	}
}

// alive reports whether the pidfile's process still runs: the pid exists,
// is not a zombie, and started when the pidfile says (not a recycled pid).
func alive(p pidRecord) bool {
	if p.PID <= 0 {
		return false
	}
	st, state, err := procStat(p.PID)
	return err == nil && state != "Z" && st == p.StartTime
}

// runningFor is how long a process that started at start (clock ticks
// since boot, as /proc/<pid>/stat says) has run; false when it cannot be
// told.
func runningFor(start uint64) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil || start == 0 {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	since, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, false
	}
	// USER_HZ is 100 on every Linux the host runs on.
	up := time.Duration((since - float64(start)/100) * float64(time.Second))
	return max(up, 0), true
}

func startTime(pid int) (uint64, error) {
	st, _, err := procStat(pid)
	return st, err
}

// procStat reads a process's start time (clock ticks after boot) and state.
func procStat(pid int) (uint64, string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	return st, f[0], err
}

// serviceDigest identifies what a service runs: its definition and the
// digests of what it comes after, so a new tree or config restarts it.
func serviceDigest(r models.Resource, deps map[string]string) string {
	d := struct {
		Command []string          `json:"command"`
		Env     map[string]string `json:"env"`
		Check   *models.Check     `json:"check"`
		After   map[string]string `json:"after"`
	}{r.Command, r.Env, r.Check, map[string]string{}}
	for _, a := range r.After {
		d.After[a] = deps[a]
	}
	b, _ := json.Marshal(d)
	return models.DigestOf(b)
}
