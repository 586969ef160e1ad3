package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/testwait"
)

func size(tb testing.TB, p string) int64 {
	tb.Helper()
	fi, err := os.Stat(p)
	if os.IsNotExist(err) {
		return -1
	}
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}

// TestRotateLog_BoundsWhatAServiceWrites: a service appends to its log
// through the descriptor it inherited while the host rotates it; every
// file stays within the cap, no more than Keep rotated files exist, the
// rotated ones start at a line, and the service's next write lands at the
// start of the truncated log (O_APPEND), not past a hole.
func TestRotateLog_BoundsWhatAServiceWrites(t *testing.T) {
	p := filepath.Join(t.TempDir(), "svc.log")
	lim := LogLimits{MaxBytes: 1000, Keep: 2}
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rotations := 0
	for i := range 200 {
		fmt.Fprintf(w, "line %04d of the service's output\n", i) // 34 bytes
		rotated, err := rotateLog(p, lim)
		if err != nil {
			t.Fatal(err)
		}
		if rotated {
			rotations++
			if s := size(t, p); s != 0 {
				t.Fatalf("after rotation %d the log holds %d bytes", rotations, s)
			}
		}
		for n := 0; n <= lim.Keep; n++ {
			if s := size(t, rotatedPath(p, n)); s > lim.MaxBytes {
				t.Fatalf("%s holds %d bytes, over the cap of %d", rotatedPath(p, n), s, lim.MaxBytes)
			}
		}
		if s := size(t, rotatedPath(p, lim.Keep+1)); s >= 0 {
			t.Fatalf("a rotated file past Keep: %s", rotatedPath(p, lim.Keep+1))
		}
	}
	if rotations < 3 {
		t.Fatalf("%d rotations of 6800 bytes under a cap of 1000", rotations)
	}
	fmt.Fprintf(w, "after\n")
	b, _ := os.ReadFile(p)
	if !strings.HasSuffix(string(b), "line 0199 of the service's output\nafter\n") || strings.Contains(string(b), "\x00") {
		t.Fatalf("the log after rotations: %q", b)
	}
	one, _ := os.ReadFile(rotatedPath(p, 1))
	if !strings.HasPrefix(string(one), "line ") {
		t.Fatalf(".1 does not start at a line: %q", one[:20])
	}

	t.Run("GrownWhileNoHostWatched", func(t *testing.T) {
		q := filepath.Join(t.TempDir(), "big.log")
		if err := os.WriteFile(q, []byte(strings.Repeat("0123456789\n", 10000)), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := rotateLog(q, lim); err != nil {
			t.Fatal(err)
		}
		if s := size(t, rotatedPath(q, 1)); s > lim.MaxBytes || s < lim.MaxBytes-11 || size(t, q) != 0 {
			t.Fatalf("a 110 KB log rotated to .1 of %d bytes, itself %d", s, size(t, q))
		}
	})
}

// TestTailFiles: the last lines of a log and its rotated files, newest
// last, escaped, within n lines and the byte budget; truncated says when
// older output was left out.
func TestTailFiles(t *testing.T) {
	lines := func(from, to int) string {
		var b strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, "l%d\n", i)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name          string
		log, one, two string // contents; "-" is absent
		n, budget     int
		want          string // lines joined by |
		truncated     bool
	}{
		{"Empty", "", "-", "-", 100, 16384, "", false},
		{"Absent", "-", "-", "-", 100, 16384, "", false},
		{"FewerThanAsked", lines(0, 3), "-", "-", 100, 16384, "l0|l1|l2", false},
		{"LastN", lines(0, 10), "-", "-", 3, 16384, "l7|l8|l9", true},
		{"ExactlyN", lines(0, 3), "-", "-", 3, 16384, "l0|l1|l2", false},
		{"ExactlyNOlderExists", lines(3, 6), lines(0, 3), "-", 3, 16384, "l3|l4|l5", true},
		{"AcrossRotations", lines(4, 6), lines(2, 4), lines(0, 2), 5, 16384, "l1|l2|l3|l4|l5", true},
		{"AllRotations", lines(4, 6), lines(2, 4), lines(0, 2), 100, 16384, "l0|l1|l2|l3|l4|l5", false},
		{"JustRotated", "", lines(0, 4), "-", 2, 16384, "l2|l3", true},
		{"Budget", lines(0, 10), "-", "-", 100, 9, "l7|l8|l9", true},
		{"UnfinishedLastLine", "a\nb", "-", "-", 100, 16384, "a|b", false},
		{"Escaped", "\x1b[31mred\x1b[0m\nnul\x00\n\xff\n", "-", "-", 100, 16384, `\x1b[31mred\x1b[0m|nul\x00|\xff`, false},
		{"ReadCutsALine", strings.Repeat("x", 100) + "\n" + lines(0, 2), "-", "-", 100, 4, "l1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "s.log")
			for i, c := range []string{tc.log, tc.one, tc.two} {
				if c != "-" {
					if err := os.WriteFile(rotatedPath(p, i), []byte(c), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, truncated, err := tailFiles([]string{p, rotatedPath(p, 1), rotatedPath(p, 2)}, tc.n, tc.budget)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "|") != tc.want || truncated != tc.truncated {
				t.Fatalf("got %q (truncated %v), want %q (truncated %v)", got, truncated, tc.want, tc.truncated)
			}
			if err := models.ValidateLogs([]models.ServiceLog{{Resource: "m.s", Why: models.LogRestarted, Lines: got}}); err != nil {
				t.Fatalf("the controller would refuse them: %v", err)
			}
		})
	}
	t.Run("BoundsOfAReport", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "s.log")
		long := strings.Repeat("é", 3000) // 6000 bytes, cut at maxLogLine
		if err := os.WriteFile(p, []byte(strings.Repeat(long+"\n", 50)+lines(0, 500)), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{models.MaxLogLines, 10} {
			got, truncated, _ := tailFiles([]string{p}, n, models.MaxLogBytes)
			if len(got) != n || !truncated || got[n-1] != "l499" {
				t.Fatalf("tail %d: %d lines, truncated %v, last %q", n, len(got), truncated, got[len(got)-1])
			}
			if err := models.ValidateLogs([]models.ServiceLog{{Resource: "m.s", Why: models.LogRestarted, Lines: got}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(p, []byte(strings.Repeat(long+"\n", 50)), 0o600); err != nil {
			t.Fatal(err)
		}
		got, _, _ := tailFiles([]string{p}, models.MaxLogLines, models.MaxLogBytes)
		if len(got) < 7 || !strings.HasSuffix(got[0], "…") {
			t.Fatalf("long lines: %d shipped, the first %q", len(got), got[0][:10])
		}
		if err := models.ValidateLogs([]models.ServiceLog{{Resource: "m.s", Why: models.LogRestarted, Lines: got}}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSupervisor_RestartShipsTheLastLines: a service that fails at start
// is started again by the supervisor, which says so; its last lines, with
// what it printed and how it exited, are what the next report carries,
// once. Its log stays within the limits while it prints.
func TestSupervisor_RestartShipsTheLastLines(t *testing.T) {
	rootDir, state := t.TempDir(), t.TempDir()
	root, err := openMachineRoot(rootDir)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := newSupervisor(state, root, slog.New(slog.DiscardHandler), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sup.limits = LogLimits{MaxBytes: 4096, Keep: 2}
	ship := &logShipper{src: sup}
	sup.onRestart = func(id string) { ship.mark(id, models.LogRestarted) }
	ctx := context.Background()
	script := func(name, body string) string {
		p := filepath.Join(rootDir, "opt", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return "/opt/" + name
	}

	failing := models.Resource{ID: "web.service", Kind: "service", Command: []string{script("fail", "echo starting\necho 'fatal: listen tcp 127.0.0.1:9000: bind: address already in use' >&2\nexit 3\n")}}
	chatty := models.Resource{ID: "web.chatty", Kind: "service", Command: []string{script("chatty", "i=0\nwhile [ $i -lt 3000 ]; do echo \"chatter $i\"; i=$((i+1)); done\nexec sleep 60\n")}}
	for _, r := range []models.Resource{failing, chatty} {
		if _, err := sup.Ensure(ctx, r, "sha256:"+r.ID); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sup.Stop(ctx, r.ID) })
	}
	t.Cleanup(sup.Close)

	testwait.For(t, 20*time.Second, "the failing service restarted", ship.waiting)
	logs := ship.take(ctx)
	if len(logs) != 1 || logs[0].Resource != "web.service" || logs[0].Why != models.LogRestarted {
		t.Fatalf("shipped: %+v", logs)
	}
	text := strings.Join(logs[0].Lines, "\n")
	for _, want := range []string{"starting", "fatal: listen tcp 127.0.0.1:9000: bind: address already in use",
		"--- mesh-host: web.service (pid ", ") exited: exit status 3", "--- mesh-host starting web.service"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the last lines lack %q:\n%s", want, text)
		}
	}
	if err := models.ValidateLogs(logs); err != nil {
		t.Fatal(err)
	}
	if again := ship.take(ctx); len(again) != 0 {
		t.Fatalf("shipped twice: %+v", again)
	}

	log := sup.LogPath("web.chatty")
	testwait.For(t, 20*time.Second, "the chatty service's log rotated", func() bool {
		b, _ := os.ReadFile(log)
		return size(t, rotatedPath(log, 1)) > 0 && !strings.Contains(string(b), "chatter 0\n")
	})
	for n := 0; n <= 2; n++ {
		if s := size(t, rotatedPath(log, n)); s > 4096 {
			t.Fatalf("%s holds %d bytes", rotatedPath(log, n), s)
		}
	}
	lines, _, err := sup.Tail(ctx, "web.chatty", 5, models.MaxLogBytes)
	if err != nil || len(lines) != 5 || lines[4] != "chatter 2999" {
		t.Fatalf("the chatty service's tail: %q %v", lines, err)
	}
}

// TestSystemd_TailReadsTheJournal: under systemd a unit's last lines come
// from the journal (a stand-in journalctl records its arguments and prints
// 150 lines, one with a terminal escape): one line more is asked for, to
// know whether older output was left out, and what comes is escaped and
// bounded like the supervisor's.
func TestSystemd_TailReadsTheJournal(t *testing.T) {
	root, _ := openMachineRoot(t.TempDir())
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	stand := filepath.Join(dir, "journalctl")
	body := "#!/bin/sh\necho \"$*\" > " + args + "\ni=0\nwhile [ $i -lt 149 ]; do echo \"line $i\"; i=$((i+1)); done\nprintf 'last \\033[2J\\n'\n"
	if err := os.WriteFile(stand, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSystemd(root)
	s.journalctl = stand
	lines, truncated, err := s.Tail(context.Background(), "x.service", models.MaxLogLines, models.MaxLogBytes)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(args)
	if want := "--unit " + UnitName("x.service") + " --lines 101 --output cat --no-pager --quiet\n"; string(got) != want {
		t.Fatalf("journalctl %s, want %s", got, want)
	}
	if len(lines) != models.MaxLogLines || !truncated || lines[0] != "line 50" || lines[99] != `last \x1b[2J` {
		t.Fatalf("%d lines (truncated %v): first %q, last %q", len(lines), truncated, lines[0], lines[len(lines)-1])
	}
	s.journalctl = filepath.Join(dir, "missing")
	if _, _, err := s.Tail(context.Background(), "x.service", 10, 100); err == nil {
		t.Fatal("no journalctl, no error")
	}
}

// TestSystemd_RestartsCounted: under systemd, systemd restarts a unit
// (Restart=always), so the host learns of it by counting: a unit whose
// NRestarts rose since the last look is marked restarted; one first seen
// or whose count fell (restarted by hand) is not.
func TestSystemd_RestartsCounted(t *testing.T) {
	root, _ := openMachineRoot(t.TempDir())
	dir := t.TempDir()
	counts := filepath.Join(dir, "counts")
	stand := filepath.Join(dir, "systemctl")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\necho \"$*\" > "+filepath.Join(dir, "args")+"\ncat "+counts+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSystemd(root)
	s.systemctl = stand
	ship := &logShipper{src: s, counter: s}
	ship.setServices([]string{"a.service", "b.service"})
	ctx := context.Background()
	look := func(a, b string) {
		t.Helper()
		if err := os.WriteFile(counts, []byte(a+"\n\n"+b+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := ship.countRestarts(ctx); err != nil {
			t.Fatal(err)
		}
	}
	look("0", "2")
	if ship.waiting() {
		t.Fatal("a first look marked a restart")
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if want := "show --property NRestarts --value " + UnitName("a.service") + " " + UnitName("b.service") + "\n"; string(args) != want {
		t.Fatalf("systemctl %s, want %s", args, want)
	}
	look("0", "3")
	ship.mu.Lock()
	pending := fmt.Sprint(ship.pending)
	ship.mu.Unlock()
	if pending != "map[b.service:restarted]" {
		t.Fatalf("after b restarted: %s", pending)
	}
	ship.mu.Lock()
	ship.pending = nil
	ship.mu.Unlock()
	look("0", "0")
	if ship.waiting() {
		t.Fatal("a count that fell marked a restart")
	}
	if err := os.WriteFile(counts, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ship.countRestarts(ctx); err == nil || !strings.Contains(err.Error(), "1 value(s) for 2 unit(s)") {
		t.Fatalf("a short answer: %v", err)
	}
}

// TestLogShipper_CrashLoopReshipsSeldom: a service that keeps restarting
// ships its lines at its first restart, then at most every
// reshipRestartsEvery (reports are rows kept); a failure or a turn to
// unhealthy ships at once; more than MaxLogServices wait for the next
// report.
func TestLogShipper_CrashLoopReshipsSeldom(t *testing.T) {
	src := tailFunc(func(id string) []string { return []string{"last of " + id} })
	now := time.Unix(1_800_000_000, 0)
	ship := &logShipper{src: src, now: func() time.Time { return now }}
	ctx := context.Background()
	took := func() string {
		var s []string
		for _, l := range ship.take(ctx) {
			s = append(s, l.Resource+":"+l.Why)
		}
		return strings.Join(s, ",")
	}

	ship.mark("m.crash", models.LogRestarted)
	if got := took(); got != "m.crash:restarted" {
		t.Fatalf("first restart: %q", got)
	}
	now = now.Add(time.Minute)
	ship.mark("m.crash", models.LogRestarted)
	if ship.waiting() || took() != "" {
		t.Fatal("a restart a minute later shipped again")
	}
	ship.mark("m.other", models.LogRestarted)
	if got := took(); got != "m.other:restarted" {
		t.Fatalf("another service's first restart: %q", got)
	}
	ship.mark("m.crash", models.LogUnhealthy)
	if got := took(); got != "m.crash:unhealthy" {
		t.Fatalf("turned unhealthy: %q", got)
	}
	now = now.Add(reshipRestartsEvery)
	ship.mark("m.crash", models.LogRestarted)
	if !ship.waiting() || took() != "m.crash:restarted" {
		t.Fatal("a restart after the interval did not ship")
	}

	for i := range models.MaxLogServices + 2 {
		ship.mark(fmt.Sprintf("m.s%02d", i), models.LogFailed)
	}
	if first := ship.take(ctx); len(first) != models.MaxLogServices || models.ValidateLogs(first) != nil {
		t.Fatalf("%d services in one report", len(first))
	}
	if rest := ship.take(ctx); len(rest) != 2 {
		t.Fatalf("%d left for the next report, want 2", len(rest))
	}
}

// tailFunc is a serviceTail from a function.
type tailFunc func(id string) []string

func (f tailFunc) Tail(_ context.Context, id string, _, _ int) ([]string, bool, error) {
	return f(id), false, nil
}

// TestSupervisor_StopSaidAsAStop: a service this host stops on purpose (a
// new build replacing it, its resource removed) ends its log with a stop,
// not with "exited: signal: terminated", which read as a crash.
func TestSupervisor_StopSaidAsAStop(t *testing.T) {
	rootDir, state := t.TempDir(), t.TempDir()
	root, err := openMachineRoot(rootDir)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := newSupervisor(state, root, slog.New(slog.DiscardHandler), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	p := filepath.Join(rootDir, "opt", "sleeper")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := models.Resource{ID: "web.service", Kind: "service", Command: []string{"/opt/sleeper"}}
	if _, err := sup.Ensure(ctx, r, "sha256:x"); err != nil {
		t.Fatal(err)
	}
	if err := sup.Stop(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the stop in the service's log", func() bool {
		b, _ := os.ReadFile(sup.LogPath(r.ID))
		return strings.Contains(string(b), "stopped by mesh-host")
	})
	if b, _ := os.ReadFile(sup.LogPath(r.ID)); strings.Contains(string(b), ") exited: ") {
		t.Fatalf("a stop on purpose is said as an exit:\n%s", b)
	}
}

// TestLogShipper_FirstRestartAfterUnhealthyShips: a service whose check
// failed (its lines shipped "unhealthy"), then a minute later starts
// crash-looping: its first restart ships at once (DESIGN: "A service that
// keeps restarting ships at its first restart"), where the reship interval
// was counted from the unrelated unhealthy ship and `meshctl logs` showed
// only the previous build's lines for 5 minutes. Later restarts still ship
// at most every reshipRestartsEvery.
func TestLogShipper_FirstRestartAfterUnhealthyShips(t *testing.T) {
	src := tailFunc(func(id string) []string { return []string{"last of " + id} })
	now := time.Unix(1_800_000_000, 0)
	ship := &logShipper{src: src, now: func() time.Time { return now }}
	ctx := context.Background()
	took := func() string {
		var s []string
		for _, l := range ship.take(ctx) {
			s = append(s, l.Resource+":"+l.Why)
		}
		return strings.Join(s, ",")
	}

	ship.mark("web.service", models.LogUnhealthy)
	if got := took(); got != "web.service:unhealthy" {
		t.Fatalf("unhealthy: %q", got)
	}
	now = now.Add(time.Minute)
	ship.mark("web.service", models.LogRestarted) // its first restart
	if !ship.waiting() {
		t.Fatal("the service's first restart is not due: an unhealthy ship a minute before held its lines back")
	}
	if got := took(); got != "web.service:restarted" {
		t.Fatalf("first restart: %q", got)
	}
	now = now.Add(time.Minute)
	ship.mark("web.service", models.LogRestarted)
	if ship.waiting() || took() != "" {
		t.Fatal("a restart a minute after the first shipped again")
	}
	now = now.Add(reshipRestartsEvery)
	if got := took(); got != "web.service:restarted" {
		t.Fatalf("a restart after the interval: %q", got)
	}
}
