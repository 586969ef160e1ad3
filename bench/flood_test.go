package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// Flood parameters. The connection count can be changed with
// MESH_BENCH_FLOOD_CONNS; the cap is set well above it, so the flood meets
// the controller's per-machine limit and its descriptors rather than the
// 503s of its connection cap.
const (
	floodConns    = 5000
	floodMaxConns = 15000
	// healthProbes are spread through the flood, one every probeEvery,
	// each on a connection of its own as a kubelet's would be.
	healthProbes = 200
	probeEvery   = 25 * time.Millisecond
	probeTimeout = 5 * time.Second
	// fdMargin is how far above its pre-flood count the controller's open
	// descriptors may stay and still count as back (the store's pool,
	// a probe in flight).
	fdMargin = 8
)

// BenchmarkFlood: thousands of connections long-poll with one machine's
// token while another machine's host waits for its change. In "once" each
// connection sends one poll and is held open; in "loop" each sends its
// next poll as soon as the last is answered, redialling when the
// controller closes it. Targets: /healthz p99 under 1 s during the flood;
// the victim's change answered within 2 s; once the flood's connections
// close, the controller's open descriptors back near their pre-flood count
// within 10 s.
func BenchmarkFlood(b *testing.B) {
	conns := floodConns
	if v := os.Getenv("MESH_BENCH_FLOOD_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("MESH_BENCH_FLOOD_CONNS=%q: a positive number", v)
		}
		conns = n
	}
	bin := b.TempDir()
	build(b, bin, "mesh-controller", "./cmd/mesh-controller")
	build(b, bin, "loadgen", "./bench/loadgen")
	for _, d := range []string{store.SQLite, store.Postgres} {
		b.Run(d, func(b *testing.B) {
			for _, loop := range []bool{false, true} {
				b.Run(map[bool]string{false: "once", true: "loop"}[loop], func(b *testing.B) {
					for range b.N {
						floodOnce(b, bin, d, conns, loop)
					}
				})
			}
		})
	}
}

func floodOnce(b *testing.B, bin, dialect string, conns int, loop bool) {
	cfg := storetest.Config(b, dialect)
	admin, _, tokens := seed(b, cfg, 2, 2)
	const attacker, victim = "m00000", "m00001"

	port := freePort(b)
	url := "http://127.0.0.1:" + port
	args := []string{"serve", "--listen", "127.0.0.1:" + port, "--data", cfg.DataDir, "--log-level", "warn",
		"--max-conns", strconv.Itoa(floodMaxConns)}
	if cfg.DatabaseURL != "" {
		args = append(args, "--database", cfg.DatabaseURL)
	}
	ctl := exec.Command(filepath.Join(bin, "mesh-controller"), args...)
	ctl.Stdout, ctl.Stderr = io.Discard, os.Stderr
	if err := ctl.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ctl.Process.Signal(os.Interrupt); _ = ctl.Wait() }()
	pid := ctl.Process.Pid
	waitUntil(b, 30*time.Second, func() bool { return metric(url, "mesh_hub_machines") == 2 })

	load := exec.Command(filepath.Join(bin, "loadgen"), "-mode", "flood", "-url", url, "-tokens", tokens,
		"-admin", admin, "-attacker", attacker, "-victim", victim, "-gen", "1", "-conns", strconv.Itoa(conns), "-loop="+strconv.FormatBool(loop))
	stdin, _ := load.StdinPipe()
	stdout, _ := load.StdoutPipe()
	load.Stderr = os.Stderr
	if err := load.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = load.Wait() }()
	say := loadgenDialogue(b, stdin, stdout)

	say("victim", "victim")
	waitUntil(b, 10*time.Second, func() bool { return metric(url, "mesh_polls_open") == 1 })
	baseline := openFDs(b, pid)
	peak := watchFDs(pid)
	ctlCPU0, loadCPU0 := cpuTime(b, pid), cpuTime(b, load.Process.Pid)

	var opened struct {
		OpenMs float64 `json:"open_ms"`
		Dials  int64
		Errors int64
	}
	say("flood", "flooding ", &opened)

	probes := probeHealth(url)

	var ch struct {
		PutMs    float64 `json:"put_ms"`
		VictimMs float64 `json:"victim_ms"`
		Status   int
		ETag     string
		Error    string
	}
	say("change", "changed ", &ch)
	if ch.Status != http.StatusOK || ch.ETag != `"2"` || ch.Error != "" {
		b.Fatalf("the victim's poll after its change: %d %s %s", ch.Status, ch.ETag, ch.Error)
	}

	pollsOpen := metric(url, "mesh_polls_open")
	stopAt := time.Now()
	var st struct {
		Requests     int64
		NotModified  int64 `json:"not_modified"`
		Refused      int64
		OtherStatus  int64 `json:"other_status"`
		Dials        int64
		DialErrors   int64 `json:"dial_errors"`
		Errors       int64
		RequestsPerS float64 `json:"requests_per_s"`
		FirstError   string  `json:"first_error"`
	}
	say("stop", "stopped ", &st)
	ctlCPU, loadCPU := cpuTime(b, pid)-ctlCPU0, cpuTime(b, load.Process.Pid)-loadCPU0
	var fds int
	back := testwait.Until(60*time.Second, func() bool { fds = openFDs(b, pid); return fds <= baseline+fdMargin })
	backS := time.Since(stopAt).Seconds()
	peakFDs := peak()
	if !back {
		b.Fatalf("%s: the controller still holds %d descriptors %.0f s after the flood closed (%d before it, peak %d)",
			dialect, fds, backS, baseline, peakFDs)
	}

	mode := map[bool]string{false: "one poll each", true: "polling in a loop"}[loop]
	b.Logf("%s flood of %d connections, %s (--max-conns %d): opened in %.0f ms; %d polls (%.0f/s over the flood), %d answered 304, %d 503, %d other, %d dials, %d dial errors, %d other errors %s; polls open after it %.0f; CPU from the flood to its stop: controller %v, load process %v",
		dialect, conns, mode, floodMaxConns, opened.OpenMs, st.Requests, st.RequestsPerS, st.NotModified, st.Refused, st.OtherStatus,
		st.Dials, st.DialErrors, st.Errors, st.FirstError, pollsOpen, ctlCPU, loadCPU)
	b.Logf("%s during the flood: /healthz p50 %.0f ms, p99 %.0f ms, max %.0f ms (%d of %d probes failed); victim's change: PUT %.0f ms, its poll's 200 %.0f ms; descriptors %d before, peak %d, back within %d %.1f s after the flood closed",
		dialect, probes.p50, probes.p99, probes.max, probes.failed, healthProbes, ch.PutMs, ch.VictimMs, baseline, peakFDs, fdMargin, backS)
	b.ReportMetric(probes.p50, "healthz-p50-ms")
	b.ReportMetric(probes.p99, "healthz-p99-ms")
	b.ReportMetric(ch.VictimMs, "victim-change-ms")
	b.ReportMetric(backS, "fds-back-s")
	b.ReportMetric(float64(peakFDs), "peak-fds")
}

// loadgenDialogue returns a function that sends the load process one
// command and reads its one-line answer, decoding the JSON after prefix
// into v if given. A load process that hangs fails the benchmark after a
// minute rather than holding it.
func loadgenDialogue(b *testing.B, stdin io.Writer, stdout io.Reader) func(cmd, prefix string, v ...any) {
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return func(cmd, prefix string, v ...any) {
		b.Helper()
		fmt.Fprintln(stdin, cmd)
		var l string
		select {
		case l = <-lines:
		case <-time.After(time.Minute):
			b.Fatalf("loadgen: no answer to %q within a minute", cmd)
		}
		if !strings.HasPrefix(l, prefix) {
			b.Fatalf("loadgen said %q to %q, want %s", l, cmd, prefix)
		}
		if len(v) > 0 {
			if err := json.Unmarshal([]byte(strings.TrimPrefix(l, prefix)), v[0]); err != nil {
				b.Fatalf("loadgen's %q: %v", l, err)
			}
		}
	}
}

type probeResult struct {
	p50, p99, max float64
	failed        int
}

// probeHealth sends healthProbes GETs of /healthz, one every probeEvery
// whether or not the last was answered, and returns their latencies; a
// failed probe counts as probeTimeout.
func probeHealth(url string) probeResult {
	client := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	lat := make([]float64, healthProbes)
	failed := make([]bool, healthProbes)
	var wg sync.WaitGroup
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for i := range healthProbes {
		<-tick.C
		wg.Go(func() {
			t0 := time.Now()
			resp, err := client.Get(url + "/healthz")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			lat[i] = float64(time.Since(t0).Microseconds()) / 1000
			if err != nil || resp.StatusCode != http.StatusOK {
				failed[i] = true
				lat[i] = float64(probeTimeout.Milliseconds())
			}
		})
	}
	wg.Wait()
	var r probeResult
	for _, f := range failed {
		if f {
			r.failed++
		}
	}
	slices.Sort(lat)
	r.p50, r.p99, r.max = lat[len(lat)*50/100], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	return r
}

// openFDs counts a process's open descriptors.
func openFDs(b *testing.B, pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		b.Fatal(err)
	}
	return len(ents)
}

// watchFDs samples a process's open descriptors every 100 ms until the
// returned function is called, which returns the most it saw.
func watchFDs(pid int) (stop func() int) {
	done := make(chan struct{})
	peak := make(chan int)
	go func() {
		most := 0
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				most = max(most, len(ents))
			}
			select {
			case <-done:
				peak <- most
				return
			case <-tick.C:
			}
		}
	}()
	return func() int { close(done); return <-peak }
}
