package agent

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"mesh/models"
)

// systemdServices runs services as systemd units: it writes a unit file
// under <root>/etc/systemd/system and calls systemctl.
type systemdServices struct {
	root       *machineRoot
	systemctl  string
	journalctl string

	// mu guards what health remembers of each unit: its NRestarts when
	// it last stayed up for restartSettle, and when a look first found it
	// restarted since.
	mu        sync.Mutex
	settledAt map[string]unitRun
	firstSeen map[string]time.Time
	// owed are the services whose unit file was written and not yet
	// reloaded, enabled and restarted: the retry of an apply whose reload
	// failed found the file as declared, said "unchanged", and systemd ran
	// the unit before it.
	owed map[string]bool
	// owedFile keeps owed across the host's restarts (in its state dir;
	// "" keeps it in memory): a new service's unit written and its reload
	// failed, the host restarted before the retry, was never enabled.
	owedFile string
	owedRead bool
}

// unitRun is a unit's NRestarts and its main process's start (systemd's
// monotonic µs), as a look found them.
type unitRun struct {
	restarts   int
	start      int64
	invocation string
}

func newSystemd(root *machineRoot) *systemdServices {
	return &systemdServices{root: root, systemctl: "systemctl", journalctl: "journalctl"}
}

// UnitName is the unit a service resource becomes: mesh-node-tools-service.service.
func UnitName(id string) string { return models.UnitName(id) }

func unitPath(id string) string { return models.UnitPath(id) }

// Unit renders a service resource as a systemd unit. Its command, working
// directory and environment come from the rule the host's own supervisor
// and the checks use (machineRoot.command), so a service runs the same
// under either.
func Unit(r models.Resource, digest, rootDir string) (string, error) {
	hc, err := commandUnder(rootDir, r.Command, r.Env)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s# digest %s\n", unitHeader, digest)
	fmt.Fprintf(&b, "[Unit]\nDescription=mesh %s (module %s, build %d)\nAfter=network.target\n\n", r.ID, r.Module, r.Build)
	b.WriteString("[Service]\nType=simple\n")
	args := append([]string{hc.Path}, hc.Args...)
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = systemdQuote(a, true)
	}
	fmt.Fprintf(&b, "ExecStart=%s\n", strings.Join(q, " "))
	// WorkingDirectory= takes a bare path (no quotes), specifiers expanded.
	fmt.Fprintf(&b, "WorkingDirectory=%s\n", strings.ReplaceAll(hc.Dir, "%", "%%"))
	for _, e := range hc.Env {
		fmt.Fprintf(&b, "Environment=%s\n", systemdQuote(e, false))
	}
	b.WriteString("Restart=always\nRestartSec=2\nKillMode=control-group\nTimeoutStopSec=10\n\n[Install]\nWantedBy=multi-user.target\n")
	return b.String(), nil
}

// systemdQuote quotes a word for ExecStart= and Environment=: one word on
// one line, whatever it holds. Every control character is written as a C
// escape (\xNN), which systemd reads back in a quoted word: systemd ends
// a unit file's line at a carriage return as at a newline, so a machine's
// variable holding "\r" in a service's env or argument added lines of its
// own to the unit (ExecStartPre=, User=root), run as root at the next
// restart. exec says the word is ExecStart='s, where "$" is doubled: it
// names variables there, and only there (Environment= does no expansion,
// so a password "pa$word" reached the service as "pa$$word").
func systemdQuote(s string, exec bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '"':
			b.WriteString(`\"`)
		case c == '%':
			b.WriteString("%%")
		case c == '$' && exec:
			b.WriteString("$$")
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func (s *systemdServices) run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, s.systemctl, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("systemctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Ensure implements services.
func (s *systemdServices) Ensure(ctx context.Context, r models.Resource, digest string) (string, error) {
	unit, err := Unit(r, digest, s.root.dir)
	if err != nil {
		return "", err
	}
	p := unitPath(r.ID)
	old, err := s.root.root.ReadFile(rel(p))
	s.mu.Lock()
	s.readOwed()
	owed := s.owed[r.ID]
	s.mu.Unlock()
	if err == nil && string(old) == unit && !owed {
		return "unchanged", s.run(ctx, "start", UnitName(r.ID))
	}
	action := "created"
	if err == nil {
		action = "updated"
	}
	s.setOwed(r.ID, true)
	if err := s.root.writeFile(p, []byte(unit), 0o644); err != nil {
		return "", err
	}
	if err := s.run(ctx, "daemon-reload"); err != nil {
		return "", err
	}
	if err := s.run(ctx, "enable", UnitName(r.ID)); err != nil {
		return "", err
	}
	if err := s.run(ctx, "restart", UnitName(r.ID)); err != nil {
		return "", err
	}
	s.setOwed(r.ID, false)
	return action, nil
}

func (s *systemdServices) setOwed(id string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readOwed()
	if s.owed[id] == on {
		return
	}
	if on {
		s.owed[id] = true
	} else {
		delete(s.owed, id)
	}
	if s.owedFile != "" {
		ids := slices.Sorted(maps.Keys(s.owed))
		_ = writeJSONAtomic(s.owedFile, ids, 0o600)
	}
}

// readOwed reads what a run of the host before this one left owed, once
// (s.mu held).
func (s *systemdServices) readOwed() {
	if s.owed == nil {
		s.owed = map[string]bool{}
	}
	if s.owedRead || s.owedFile == "" {
		return
	}
	s.owedRead = true
	var ids []string
	if readJSON(s.owedFile, &ids) == nil {
		for _, id := range ids {
			s.owed[id] = true
		}
	}
}

// unitHeader starts every unit this host writes (Unit).
const unitHeader = "# Written by mesh-host; changes are overwritten.\n"

// Strays implements strayServices: the units this host wrote (its header,
// and a Description naming a service whose unit is that file) that known
// does not name — one an apply enabled and started, the host killed
// before its state said so, was never stopped and started again at every
// boot.
func (s *systemdServices) Strays(known func(id string) bool) []string {
	dir := rel(models.UnitPath("x"))
	dir = dir[:strings.LastIndexByte(dir, '/')]
	f, err := s.root.root.Open(dir)
	if err != nil {
		return nil
	}
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return nil
	}
	var out []string
	for _, name := range names {
		if !strings.HasPrefix(name, "mesh-") || !strings.HasSuffix(name, ".service") {
			continue
		}
		b, err := s.root.root.ReadFile(dir + "/" + name)
		if err != nil || !strings.HasPrefix(string(b), unitHeader) {
			continue
		}
		_, desc, _ := strings.Cut(string(b), "\nDescription=mesh ")
		id, _, ok := strings.Cut(desc, " (module ")
		if !ok || UnitName(id) != name || known(id) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// Stop implements services.
func (s *systemdServices) Stop(ctx context.Context, id string) error {
	_, gone := s.root.root.Lstat(rel(unitPath(id)))
	if err := s.run(ctx, "disable", "--now", UnitName(id)); err != nil {
		if !os.IsNotExist(gone) {
			return err
		}
		// Its unit file is gone (a person's doing): disable refuses, and
		// never reaches the stop. A unit still loaded is stopped; one
		// systemd no longer knows ("not loaded", exit 5) was stopped
		// already, where every later apply failed on a service that was
		// gone.
		if err := s.run(ctx, "stop", UnitName(id)); err != nil && !strings.Contains(err.Error(), "exit status 5") &&
			!strings.Contains(err.Error(), "not loaded") {
			return err
		}
	}
	s.setOwed(id, false)
	if err := s.root.remove(unitPath(id)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return s.run(ctx, "daemon-reload")
}

// Renewed implements services.
func (s *systemdServices) Renewed(ctx context.Context, id, signal string) error {
	if signal != "" {
		// The main process, as the host's own supervisor signals it:
		// systemctl kill's default is every process of the unit (workers,
		// a wrapper's children), most of which SIGHUP ends. --kill-who is
		// the spelling systemd before 252 knows; 252 takes it still.
		return s.run(ctx, "kill", "--kill-who=main", "--signal=SIG"+signal, UnitName(id))
	}
	return s.run(ctx, "restart", UnitName(id))
}

// Close implements services.
func (s *systemdServices) Close() {}

// health implements serviceHealth under systemd, which restarts a unit
// itself (Restart=always): a unit not active now (between two starts, or
// given up on) is a failing check of its service, saying how its process
// last ended; one that systemd restarted (NRestarts above the count it had
// when it last stayed up for restartSettle) fails until it has stayed up
// that long — as the host's own supervisor says of the services it runs.
// A systemctl that does not answer says nothing: the declared checks
// alone count then.
func (s *systemdServices) health(id string) svcHealth {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, s.systemctl, "show", "--property",
		"ActiveState,SubState,NRestarts,ExecMainStartTimestampMonotonic,ExecMainCode,ExecMainStatus,InvocationID", UnitName(id)).Output()
	if err != nil {
		return svcHealth{}
	}
	p := map[string]string{}
	for _, l := range splitLines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			p[k] = v
		}
	}
	n, err := strconv.Atoi(p["NRestarts"])
	if err != nil || p["ActiveState"] == "" {
		return svcHealth{}
	}
	h := svcHealth{known: true}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settledAt == nil {
		s.settledAt, s.firstSeen = map[string]unitRun{}, map[string]time.Time{}
	}
	if st := p["ActiveState"]; st != "active" && st != "reloading" {
		h.failing = true
		h.detail = "exited: " + mainExit(p["ExecMainCode"], p["ExecMainStatus"]) + " (systemd: " + p["ActiveState"] + "/" + p["SubState"] + ")"
		if _, ok := s.firstSeen[id]; !ok {
			s.firstSeen[id] = time.Now()
		}
		return h
	}
	var ts unix.Timespec
	start, err := strconv.ParseInt(p["ExecMainStartTimestampMonotonic"], 10, 64)
	if err == nil && start > 0 && unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
		h.up = time.Duration(ts.Nano()-start*1000) * time.Nanosecond
	}
	settled := s.settledAt[id]
	since := n - settled.restarts
	switch {
	case n < settled.restarts:
		// Started by hand since (a start resets the count): every
		// restart counted now came after it.
		since = n
	case since == 0 && settled.restarts > 0 && anotherRun(settled, p["InvocationID"], start):
		// As many restarts as when it settled, yet another run of the
		// unit: started by hand since, and restarted as often again.
		since = n
	}
	if h.up >= restartSettle || since == 0 {
		if h.up >= restartSettle {
			s.settledAt[id] = unitRun{restarts: n, start: start, invocation: p["InvocationID"]}
		}
		delete(s.firstSeen, id)
		return h
	}
	first, ok := s.firstSeen[id]
	if !ok {
		first = time.Now()
		s.firstSeen[id] = first
	}
	times := "times"
	if since == 1 {
		times = "time"
	}
	h.failing = true
	h.detail = fmt.Sprintf("exited; restarted by systemd %d %s since %s", since, times, first.UTC().Format("15:04:05"))
	return h
}

// anotherRun says whether a unit runs another time than it did when it
// settled: a new invocation (systemd gives each start, by hand or by its
// Restart=, one of its own; a new main process of the same run, as a
// daemon re-executing on reload makes, is none). Without invocation ids
// (an older systemd), another main process's start stands for one.
func anotherRun(settled unitRun, invocation string, start int64) bool {
	if invocation != "" && settled.invocation != "" {
		return invocation != settled.invocation
	}
	return start != settled.start
}

// mainExit says how a unit's main process ended, from systemctl's
// ExecMainCode (a CLD_* code) and ExecMainStatus.
func mainExit(code, status string) string {
	switch code {
	case "1":
		return "exit status " + status
	case "2", "3":
		if n, err := strconv.Atoi(status); err == nil {
			return "killed by " + unix.SignalName(unix.Signal(n))
		}
	}
	return "not running"
}
