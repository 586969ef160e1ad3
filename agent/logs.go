package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"mesh/models"
)

// Service output on the host.
//
// A service supervised by the host writes its stdout and stderr straight
// into its log file (an O_APPEND descriptor it inherited), because it
// runs in its own session and must outlive the host's restarts and
// upgrades: a pipe read by the host would break (SIGPIPE) the moment the
// host went away. That is why the output is not bounded by a writer
// library such as lumberjack, which must be the process that writes and
// rotates by renaming its own file: a rename would leave the service
// writing into the renamed file forever. Instead the supervisor rotates
// by copy and truncate (logrotate's copytruncate), which O_APPEND makes
// safe for the writer: past MaxBytes the last MaxBytes of the file are
// copied to .1 (.1 moving to .2 …) and the file is truncated, so the
// service's next write lands at its start. The cost, named here: a line
// written between the copy and the truncation (microseconds) is lost, and
// a file can overshoot the cap by what a service writes in one check of
// its size (LogCheckEvery).
//
// Under systemd the journal keeps (and bounds) a unit's output; the host
// only reads its tail.

// LogLimits bound what the host keeps of one service's output.
type LogLimits struct {
	// MaxBytes is the size past which a service's log is rotated.
	MaxBytes int64
	// Keep is how many rotated files are kept (name.log.1 … .Keep).
	Keep int
}

// DefaultLogLimits keep at most about 3 MiB of output per service.
func DefaultLogLimits() LogLimits { return LogLimits{MaxBytes: 1 << 20, Keep: 2} }

func (l *LogLimits) defaults() {
	d := DefaultLogLimits()
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.Keep <= 0 {
		l.Keep = d.Keep
	}
}

// maxLogLine is where one shipped line is cut: a service printing one
// huge line still ships several.
const maxLogLine = 2048

// rotatedPath is the n-th rotated file of a log (0: the log itself).
func rotatedPath(p string, n int) string {
	if n == 0 {
		return p
	}
	return p + "." + strconv.Itoa(n)
}

// rotateLog keeps the log at p, which another process appends to, within
// lim: when it has grown past MaxBytes, its last MaxBytes (from a line's
// start) become p.1, the older rotated files move up (the oldest goes),
// and p is truncated. It says whether it rotated.
func rotateLog(p string, lim LogLimits) (bool, error) {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if fi.Size() <= lim.MaxBytes {
		return false, nil
	}
	for n := lim.Keep; n > 1; n-- {
		if err := os.Rename(rotatedPath(p, n-1), rotatedPath(p, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
	}
	if err := copyTail(p, rotatedPath(p, 1), lim.MaxBytes); err != nil {
		return false, err
	}
	return true, os.Truncate(p, 0)
}

// copyTail writes the last limit bytes of src (from the start of a line when
// it cuts) to dst, through a temp file and a rename.
func copyTail(src, dst string, limit int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	start := max(end-limit, 0)
	buf := make([]byte, end-start)
	if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if start > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 && i < len(buf)-1 {
			buf = buf[i+1:]
		}
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, buf, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// tailFiles is the last lines of a log and its rotated files (paths, the
// newest first), escaped for showing and within the bounds a report
// carries: at most n lines and budget bytes (a newline counted per line).
// truncated says older output was left out.
func tailFiles(paths []string, n, budget int) (lines []string, truncated bool, err error) {
	var raw []string // oldest first
	for i, p := range paths {
		// Four times the budget: lines cut at maxLogLine may take less
		// room escaped than they did raw.
		chunk, whole, err := readEnd(p, 4*int64(budget))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		ls := splitLines(chunk)
		if !whole && len(ls) > 1 {
			ls = ls[1:] // the first is the end of a line cut by the read
		}
		raw = append(ls, raw...)
		if !whole {
			truncated = true
			break
		}
		if len(raw) >= n {
			truncated = laterExists(paths[i+1:])
			break
		}
	}
	lines, cut := selectTail(raw, n, budget)
	return lines, truncated || cut, nil
}

// selectTail escapes the last lines of raw (oldest first) and keeps as
// many as fit in n lines and budget bytes; cut says some were left out.
func selectTail(raw []string, n, budget int) ([]string, bool) {
	size, start := 0, len(raw)
	out := make([]string, len(raw))
	for start > 0 && len(raw)-start < n {
		l := models.EscapeLogLine(raw[start-1], maxLogLine)
		if size+len(l)+1 > budget {
			break
		}
		size += len(l) + 1
		out[start-1] = l
		start--
	}
	return out[start:], start > 0
}

// laterExists says whether any of the (older) files exist.
func laterExists(paths []string) bool {
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			return true
		}
	}
	return false
}

// readEnd reads the last limit bytes of p; whole says it read all of it.
func readEnd(p string, limit int64) ([]byte, bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, false, err
	}
	start := max(end-limit, 0)
	buf := make([]byte, end-start)
	n, err := f.ReadAt(buf, start)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	return buf[:n], start == 0, nil
}

// splitLines splits output into lines without their newlines; a last
// line without one (still being written) is a line too.
func splitLines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// serviceTail is a services implementation that can tell a service's last
// lines of output.
type serviceTail interface {
	Tail(ctx context.Context, id string, n, budget int) (lines []string, truncated bool, err error)
}

// restartCounter is a services implementation whose services are started
// again by something other than the host (systemd's Restart=always): it
// counts those restarts.
type restartCounter interface {
	Restarts(ctx context.Context, ids []string) (map[string]int, error)
}

// logShipper remembers the services whose last lines ride the next report,
// and why: one that failed to apply, restarted, or turned unhealthy.
type logShipper struct {
	src      serviceTail
	counter  restartCounter // nil: the supervisor tells of restarts itself
	services []string       // the services the host runs, for counter

	mu      sync.Mutex
	pending map[string]string    // resource → why
	shipped map[string]time.Time // resource → when its lines last rode a report marked restarted
	counts  map[string]int       // restarts counted at the last look
	now     func() time.Time     // the clock (tests move it)
}

// reshipRestartsEvery bounds how often a service that keeps restarting
// ships its lines again: its first restart ships at once, later ones at
// most this often (reports are kept as rows, and a crash loop must not
// fill the store with a report per check interval). A failure or a turn
// to unhealthy ships at once.
const reshipRestartsEvery = 5 * time.Minute

func (l *logShipper) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// due says whether id's lines, marked for why, may ride a report now: a
// restart is counted from the last time its lines shipped for a restart,
// whatever shipped for another reason since (lines of an unhealthy check
// are not a crash loop's first restart). Called with mu held.
func (l *logShipper) due(id, why string, now time.Time) bool {
	last, ok := l.shipped[id]
	return why != models.LogRestarted || !ok || now.Sub(last) >= reshipRestartsEvery
}

// setServices tells which services the host runs now.
func (l *logShipper) setServices(ids []string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.services = ids
}

// countRestarts marks the services restarted since the last look, when
// their restarts are counted elsewhere (systemd). A count first seen, or
// one that went down (a unit restarted by the host, or reloaded), marks
// nothing.
func (l *logShipper) countRestarts(ctx context.Context) error {
	if l == nil || l.counter == nil {
		return nil
	}
	l.mu.Lock()
	ids := l.services
	l.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	now, err := l.counter.Restarts(ctx, ids)
	if err != nil {
		return err
	}
	l.mu.Lock()
	prev := l.counts
	l.counts = now
	l.mu.Unlock()
	for id, n := range now {
		if was, ok := prev[id]; ok && n > was {
			l.mark(id, models.LogRestarted)
		}
	}
	return nil
}

// whyRank orders the reasons when several came up between reports: the
// worst is said.
var whyRank = map[string]int{models.LogRestarted: 1, models.LogUnhealthy: 2, models.LogFailed: 3}

// mark asks for id's last lines in the next report.
func (l *logShipper) mark(id, why string) {
	if l == nil || l.src == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[string]string{}
	}
	if whyRank[why] > whyRank[l.pending[id]] {
		l.pending[id] = why
	}
}

// waiting says whether lines wait for a report now.
func (l *logShipper) waiting() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	for id, why := range l.pending {
		if l.due(id, why, now) {
			return true
		}
	}
	return false
}

// take reads the last lines of every marked service that is due (at most
// models.MaxLogServices of them, by id; the rest wait for a later report)
// and forgets them.
func (l *logShipper) take(ctx context.Context) []models.ServiceLog {
	if l == nil || l.src == nil {
		return nil
	}
	l.mu.Lock()
	now := l.clock()
	var ids, whys []string
	for _, id := range sortedKeys(l.pending) {
		if why := l.pending[id]; len(ids) < models.MaxLogServices && l.due(id, why, now) {
			ids, whys = append(ids, id), append(whys, why)
			delete(l.pending, id)
			if why == models.LogRestarted {
				if l.shipped == nil {
					l.shipped = map[string]time.Time{}
				}
				l.shipped[id] = now
			}
		}
	}
	l.mu.Unlock()
	var out []models.ServiceLog
	for i, id := range ids {
		lines, cut, err := l.src.Tail(ctx, id, models.MaxLogLines, models.MaxLogBytes)
		if err != nil {
			lines = []string{models.EscapeLogLine(fmt.Sprintf("--- mesh-host: reading the output of %s: %v", id, err), maxLogLine)}
		}
		if lines == nil {
			lines = []string{}
		}
		out = append(out, models.ServiceLog{Resource: id, Why: whys[i], Lines: lines, Truncated: cut})
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// resourceFailed is an apply error that names the resource it failed on,
// so the host can ship a failed service's last lines.
type resourceFailed struct {
	id  string
	err error
}

func (e *resourceFailed) Error() string { return e.err.Error() }
func (e *resourceFailed) Unwrap() error { return e.err }

// failedService is the id of the service an apply error names, if any.
func failedService(err error, d *models.DeclarationPayload) string {
	var rf *resourceFailed
	if !errors.As(err, &rf) || d == nil {
		return ""
	}
	for _, r := range d.Resources {
		if r.ID == rf.id && r.Kind == "service" {
			return r.ID
		}
	}
	return ""
}

// rotate keeps a supervised service's log within the supervisor's limits.
func (s *supervisor) rotate(id string) {
	if _, err := rotateLog(s.LogPath(id), s.limits); err != nil {
		s.log.Warn("rotating a service's log", "service", id, "err", err)
	}
}

// noteExit says why a service the host started exited: its health turns
// now, with the reason its Wait gave (a look finding it gone leaves it to
// this while it is being reaped), then its log says so.
func (s *supervisor) noteExit(id string, pid int, err error) {
	why := "exit status 0"
	if err != nil {
		why = err.Error()
	}
	_, stopped := s.stopping.LoadAndDelete(pid)
	news := false
	if !stopped {
		s.mu.Lock()
		sv := s.svcs[id]
		s.mu.Unlock()
		watched := false
		if sv != nil {
			sv.mu.Lock()
			if watched = sv.pid.PID == pid; watched {
				news = sv.exited(s, pid, time.Now())
				sv.why = why // a look may have found it exited first
			}
			sv.mu.Unlock()
		}
		if !watched {
			// Not watched yet (it exited at once): its watch reads it.
			s.exitWhy.Store(pid, why)
		}
	}
	s.reaping.Delete(pid)
	if f, ferr := os.OpenFile(s.LogPath(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); ferr == nil {
		if stopped {
			fmt.Fprintf(f, "--- mesh-host: %s (pid %d) stopped by mesh-host (%s)\n", id, pid, why)
		} else {
			fmt.Fprintf(f, "--- mesh-host: %s (pid %d) exited: %s\n", id, pid, why)
		}
		f.Close()
	}
	if news && s.onExit != nil {
		s.onExit(id)
	}
}

// noteGone writes to a service's log that its process, adopted from the
// host before this one, is gone: not this host's child, so how it ended is
// not known (its log went from its last line to the next start).
func (s *supervisor) noteGone(id string, pid int) {
	if f, err := os.OpenFile(s.LogPath(id), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
		fmt.Fprintf(f, "--- mesh-host: %s (pid %d) exited (started by an earlier run of mesh-host, so how it ended is not known)\n", id, pid)
		f.Close()
	}
}

// Tail implements serviceTail: the end of the service's log and its
// rotated files.
func (s *supervisor) Tail(_ context.Context, id string, n, budget int) ([]string, bool, error) {
	paths := make([]string, s.limits.Keep+1)
	for i := range paths {
		paths[i] = rotatedPath(s.LogPath(id), i)
	}
	return tailFiles(paths, n, budget)
}

// Tail implements serviceTail: the unit's last lines from the journal,
// which keeps and bounds a unit's output under systemd.
func (s *systemdServices) Tail(ctx context.Context, id string, n, budget int) ([]string, bool, error) {
	// One line more than asked: if it comes, older output was left out.
	cmd := exec.CommandContext(ctx, s.journalctl, "--unit", UnitName(id), "--lines", strconv.Itoa(n+1), "--output", "cat", "--no-pager", "--quiet")
	// Only the end is kept, as readEnd keeps of a log file: the lines a
	// unit's journal holds may be far longer than what is shipped, and
	// all of them were read into memory (64 MiB of lines, 320 MiB
	// allocated, to ship 16 KiB).
	out := &tailBuffer{max: 4 * budget}
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &limitedBuffer{max: 64 << 10, b: &errOut}
	if err := cmd.Run(); err != nil {
		return nil, false, fmt.Errorf("journalctl: %v: %s", err, strings.TrimSpace(errOut.String()))
	}
	b := out.bytes()
	if out.dropped {
		// The first line is a piece of one: dropped with what came before,
		// unless it is the only one (a last line longer than what is
		// kept, its end the reason the unit failed), kept cut as
		// tailFiles keeps it.
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(bytes.TrimRight(b, "\n")) {
			b = b[i+1:]
		}
	}
	raw := splitLines(b)
	lines, cut := selectTail(raw, n, budget)
	return lines, cut || out.dropped || len(raw) > n, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max     int
	buf     []byte
	dropped bool // bytes before the kept ones were written
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.dropped = t.dropped || len(t.buf) > 0 || len(p) > t.max
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.dropped = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) bytes() []byte { return t.buf }

// limitedBuffer keeps the first max bytes written to b.
type limitedBuffer struct {
	max int
	b   *bytes.Buffer
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Restarts implements restartCounter: each unit's NRestarts, the restarts
// systemd made (Restart=always) since the unit was last started by hand.
func (s *systemdServices) Restarts(ctx context.Context, ids []string) (map[string]int, error) {
	args := []string{"show", "--property", "NRestarts", "--value"}
	for _, id := range ids {
		args = append(args, UnitName(id))
	}
	cmd := exec.CommandContext(ctx, s.systemctl, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("systemctl show: %v: %s", err, strings.TrimSpace(errOut.String()))
	}
	// One value per unit, in order, units apart by an empty line.
	var vals []string
	for _, l := range splitLines(out.Bytes()) {
		if l = strings.TrimSpace(l); l != "" {
			vals = append(vals, l)
		}
	}
	if len(vals) != len(ids) {
		return nil, fmt.Errorf("systemctl show: %d value(s) for %d unit(s)", len(vals), len(ids))
	}
	counts := make(map[string]int, len(ids))
	for i, id := range ids {
		n, err := strconv.Atoi(vals[i])
		if err != nil {
			return nil, fmt.Errorf("systemctl show: NRestarts of %s: %q", UnitName(id), vals[i])
		}
		counts[id] = n
	}
	return counts, nil
}
