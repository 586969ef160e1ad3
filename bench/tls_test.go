package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/store"
	"mesh/store/storetest"
)

// BenchmarkReconnectTLS: MESH_BENCH_MACHINES hosts (10,000 by default)
// hold TLS polls; the controller is stopped and started again on the same
// data directory and port. Measured: per host, the time from the new
// controller's start until its next poll is sent (handshake done), p50
// and p99, and the controller's CPU until every host's poll is parked
// again — with each host keeping a TLS session cache (resume: the session
// ticket keys live in the store, so the new controller resumes the old
// one's sessions) and without (full: every handshake a full one).
func BenchmarkReconnectTLS(b *testing.B) {
	bin := b.TempDir()
	build(b, bin, "mesh-controller", "./cmd/mesh-controller")
	build(b, bin, "loadgen", "./bench/loadgen")
	for _, resume := range []bool{true, false} {
		name := "full"
		if resume {
			name = "resume"
		}
		b.Run(fmt.Sprintf("%s-%d", name, fanoutHosts), func(b *testing.B) {
			for range b.N {
				reconnect(b, bin, resume, fanoutHosts)
			}
		})
	}
}

// BenchmarkIdle: MESH_BENCH_MACHINES idle hosts poll with a 5 s wait, so
// each polls again every ~5 s; the controller's CPU is measured over 30 s
// (MESH_BENCH_IDLE_SECONDS) over plain HTTP and over TLS, each both ways:
// polling again on the connection the answer left open (keep, as a host's
// HTTP client does), and each poll on a connection of its own (close; over
// TLS a full handshake each, or a resumed session).
func BenchmarkIdle(b *testing.B) {
	bin := b.TempDir()
	build(b, bin, "mesh-controller", "./cmd/mesh-controller")
	build(b, bin, "loadgen", "./bench/loadgen")
	window := time.Duration(envInt("MESH_BENCH_IDLE_SECONDS", 30)) * time.Second
	for _, v := range []struct {
		name              string
		tls, resume, keep bool
	}{{"plain-keep", false, false, true}, {"plain-close", false, false, false},
		{"tls-keep", true, false, true}, {"tls-close-full", true, false, false}, {"tls-close-resume", true, true, false}} {
		b.Run(fmt.Sprintf("%s-%d", v.name, fanoutHosts), func(b *testing.B) {
			for range b.N {
				idle(b, bin, v.tls, v.resume, v.keep, fanoutHosts, window)
			}
		})
	}
}

// holdResult is the load generator's report (-mode hold).
type holdResult struct {
	Hosts, Reconnected                   int
	P50Ms                                float64 `json:"p50_ms"`
	P99Ms                                float64 `json:"p99_ms"`
	MaxMs                                float64 `json:"max_ms"`
	Polls, Handshakes, Resumed, Failures int64
	Seconds                              float64
}

// holdRun is a controller on SQLite with n machines and the load generator
// holding their polls (-mode hold).
type holdRun struct {
	b         *testing.B
	bin, port string
	url, pin  string
	args      []string
	ctl       *exec.Cmd
	started   time.Time
	stdin     io.WriteCloser
	lines     *bufio.Scanner
	load      *exec.Cmd
	tls       bool
	pprofURL  string // the controller's CPU profile, seconds to add (MESH_BENCH_PPROF)
}

func startHold(b *testing.B, bin string, tls, resume, keep bool, n int, wait string) *holdRun {
	cfg := storetest.Config(b, store.SQLite)
	_, _, tokens := seed(b, cfg, n, n)
	r := &holdRun{b: b, bin: bin, port: freePort(b), tls: tls}
	r.args = []string{"serve", "--listen", "127.0.0.1:" + r.port, "--data", cfg.DataDir, "--log-level", "warn"}
	if tls {
		r.args = append(r.args, "--tls")
	}
	// MESH_BENCH_PPROF=DIR: the controller serves --pprof, and an idle
	// window is profiled into DIR (see idle).
	if os.Getenv("MESH_BENCH_PPROF") != "" {
		pp := freePort(b)
		r.args = append(r.args, "--pprof", "127.0.0.1:"+pp)
		r.pprofURL = "http://127.0.0.1:" + pp + "/debug/pprof/profile?seconds="
	}
	r.startController(n)
	r.load = exec.Command(filepath.Join(bin, "loadgen"), "-mode", "hold", "-url", r.url, "-tokens", tokens,
		"-sources", strconv.Itoa(max(1, (n+19999)/20000)), "-ca-pin", r.pin, "-wait", wait, "-resume="+strconv.FormatBool(resume), "-keep="+strconv.FormatBool(keep))
	r.stdin, _ = r.load.StdinPipe()
	stdout, _ := r.load.StdoutPipe()
	r.load.Stderr = os.Stderr
	if err := r.load.Start(); err != nil {
		b.Fatal(err)
	}
	r.lines = bufio.NewScanner(stdout)
	r.say("start", "started")
	if wait == "240s" {
		r.waitParked(n)
		return r
	}
	// Polls of a short wait are not all open at once (over TLS, a loaded
	// controller handshakes slower than 5 s polls come back): every host
	// having sent its first poll is the steady state.
	waitUntil(b, 120*time.Second+time.Duration(n)*time.Millisecond, func() bool { return r.report().Reconnected == n })
	return r
}

func (r *holdRun) startController(n int) {
	r.ctl = exec.Command(filepath.Join(r.bin, "mesh-controller"), r.args...)
	banner := &syncBuffer{}
	r.ctl.Stdout, r.ctl.Stderr = banner, os.Stderr
	r.started = time.Now()
	if err := r.ctl.Start(); err != nil {
		r.b.Fatal(err)
	}
	r.url = "http://127.0.0.1:" + r.port
	if r.tls {
		r.url, r.pin = "https://127.0.0.1:"+r.port, trustCA(r.b, r.port, banner)
	}
	waitUntil(r.b, 30*time.Second+time.Duration(n)*time.Millisecond, func() bool { return metric(r.url, "mesh_hub_machines") == float64(n) })
}

func (r *holdRun) stopController() {
	_ = r.ctl.Process.Signal(os.Interrupt)
	_ = r.ctl.Wait()
}

func (r *holdRun) close() {
	r.stopController()
	r.stdin.Close()
	_ = r.load.Process.Kill()
	_ = r.load.Wait()
	hc = defaultClient
}

// say sends a command and expects a line starting with want; it returns
// the rest of that line.
func (r *holdRun) say(cmd, want string) string {
	fmt.Fprintln(r.stdin, cmd)
	if !r.lines.Scan() || !strings.HasPrefix(r.lines.Text(), want) {
		r.b.Fatalf("loadgen said %q, want %s", r.lines.Text(), want)
	}
	return strings.TrimSpace(strings.TrimPrefix(r.lines.Text(), want))
}

func (r *holdRun) report() holdResult {
	var res holdResult
	if err := json.Unmarshal([]byte(r.say("report", "result")), &res); err != nil {
		r.b.Fatal(err)
	}
	return res
}

func (r *holdRun) waitParked(n int) {
	open := -1.0
	defer func() {
		if r.b.Failed() {
			r.b.Logf("%.0f of %d polls open", open, n)
		}
	}()
	waitUntil(r.b, 120*time.Second+time.Duration(n)*time.Millisecond, func() bool {
		open = metric(r.url, "mesh_polls_open")
		return open == float64(n)
	})
}

func reconnect(b *testing.B, bin string, resume bool, n int) {
	r := startHold(b, bin, true, resume, false, n, "240s")
	defer r.close()
	pin := r.pin
	r.stopController()
	r.say("mark", "marked")
	r.startController(n)
	if r.pin != pin {
		b.Fatalf("the restarted controller's CA pin %s, want %s", r.pin, pin)
	}
	ready := time.Since(r.started)
	cpu0 := cpuTime(b, r.ctl.Process.Pid)
	r.waitParked(n)
	all := time.Since(r.started)
	cpu := cpuTime(b, r.ctl.Process.Pid)
	res := r.report()
	b.Logf("reconnect (resume=%v): %d hosts; controller ready %v after its start, every poll parked again %v after it; per host p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d handshakes, %d resumed, %d failed attempts; controller CPU %v in all, %v once ready",
		resume, n, ready.Round(time.Millisecond), all.Round(time.Millisecond), res.P50Ms, res.P99Ms, res.MaxMs, res.Handshakes, res.Resumed, res.Failures, cpu.Round(time.Millisecond), (cpu - cpu0).Round(time.Millisecond))
	if res.Reconnected != n {
		b.Fatalf("%d of %d hosts reconnected", res.Reconnected, n)
	}
	if resume && res.Resumed < int64(n) {
		b.Errorf("%d of %d handshakes resumed", res.Resumed, res.Handshakes)
	}
	b.ReportMetric(res.P50Ms, "p50-ms")
	b.ReportMetric(res.P99Ms, "p99-ms")
	b.ReportMetric(float64(all.Milliseconds()), "all-parked-ms")
	b.ReportMetric(float64((cpu-cpu0).Microseconds())/float64(n), "cpu-µs/host")
}

func idle(b *testing.B, bin string, tls, resume, keep bool, n int, window time.Duration) {
	r := startHold(b, bin, tls, resume, keep, n, "5s")
	defer r.close()
	pid := r.ctl.Process.Pid
	// One more round of 5 s polls: the measured window starts in the
	// steady state, not with every host's first handshake.
	time.Sleep(6 * time.Second) // a measurement window, not a wait for a state
	r.say("mark", "marked")
	cpu0 := cpuTime(b, pid)
	if dir := os.Getenv("MESH_BENCH_PPROF"); dir != "" {
		// The profile covers the measurement window (the request returns
		// when it ends).
		profile(b, fmt.Sprintf("%s%d", r.pprofURL, int(window.Seconds())),
			filepath.Join(dir, fmt.Sprintf("idle-%s-%d.pprof", b.Name()[strings.LastIndexByte(b.Name(), '/')+1:], time.Now().UnixNano())))
	} else {
		time.Sleep(window) // the measurement window
	}
	cpu := cpuTime(b, pid) - cpu0
	res := r.report()
	pct := 100 * cpu.Seconds() / res.Seconds
	b.Logf("idle (tls=%v resume=%v keep=%v): %d hosts, %.0f s: controller CPU %v (%.1f%% of one core), %.0f polls/s, %.0f handshakes/s (%d resumed), %d failures",
		tls, resume, keep, n, res.Seconds, cpu.Round(time.Millisecond), pct, float64(res.Polls)/res.Seconds, float64(res.Handshakes)/res.Seconds, res.Resumed, res.Failures)
	b.ReportMetric(pct, "cpu-%")
	b.ReportMetric(float64(res.Polls)/res.Seconds, "polls/s")
	b.ReportMetric(float64(res.Handshakes)/res.Seconds, "handshakes/s")
	if res.Polls > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(res.Polls), "cpu-µs/poll")
	}
}
