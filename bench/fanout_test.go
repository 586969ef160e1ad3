// Package bench holds benchmarks that need real processes: the controller
// binary on one side, a load process on the other, over real TCP.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/auth"
	"mesh/meshca"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// fanoutHosts is how many waiting hosts one change reaches
// (MESH_BENCH_MACHINES overrides it, e.g. for a quick smoke).
var fanoutHosts = envInt("MESH_BENCH_MACHINES", 10000)

// benchManifest is the build every host is sent: one file naming the
// machine, then (MESH_BENCH_RESOURCES, for a service's manifest of more)
// configuration files the same on every machine, every eighth of them
// naming the machine too.
func benchManifest(n int) string {
	res := []string{`{"name": "config", "kind": "file", "path": "/etc/mod.conf", "content": "machine=${machine.name}\n"}`}
	for i := 1; i < n; i++ {
		line := fmt.Sprintf("key_%03d = \"a value of some length\"\n", i)
		if i%8 == 0 {
			line = "name = ${machine.name}\n"
		}
		res = append(res, fmt.Sprintf(`{"name": "conf%03d", "kind": "file", "path": "/etc/mod/conf%03d.toml", "content": %q}`, i, i, strings.Repeat(line, 6)))
	}
	return `{"resources": [` + strings.Join(res, ", ") + `]}`
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// envOr is the environment variable name when it is set (even empty), else def.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// BenchmarkFanout: one change that touches 10,000 machines reaches all
// 10,000 waiting hosts. Targets (DESIGN.md): p99 under 1 s; under 20 KiB
// of controller memory per waiting poll. Both the first fan-out after the
// polls open and the second are measured.
func BenchmarkFanout(b *testing.B) {
	bin := b.TempDir()
	build(b, bin, "mesh-controller", "./cmd/mesh-controller")
	build(b, bin, "loadgen", "./bench/loadgen")
	for _, d := range []string{store.SQLite, store.Postgres} {
		for _, tls := range []bool{false, true} {
			name := d
			if tls {
				name += "-tls"
			}
			b.Run(fmt.Sprintf("%s-%d", name, fanoutHosts), func(b *testing.B) {
				for range b.N {
					fanout(b, bin, d, tls, fanoutHosts, fanoutHosts, nil)
				}
			})
		}
	}
}

func build(b *testing.B, dir, name, pkg string) {
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
}

// fanout measures two fan-outs to fanoutHosts waiting hosts of machines
// enrolled ones (all of them, unless the open-file limit says otherwise),
// over TLS (--tls, every poll its own handshake) when tls is set.
// large, when given, also measures what only matters at 100,000 machines
// (large_test.go).
func fanout(b *testing.B, bin, dialect string, tls bool, machines, fanoutHosts int, large *largeRun) {
	n := fanoutHosts
	cfg := storetest.Config(b, dialect)
	admin, pub, tokens := seed(b, cfg, machines, fanoutHosts)
	// One loopback source address has ~28,000 ephemeral ports.
	sources := max(1, (n+19999)/20000)
	if large != nil {
		sources = max(4, sources)
	}

	port := freePort(b)
	url := "http://127.0.0.1:" + port
	args := []string{"serve", "--listen", "127.0.0.1:" + port, "--data", cfg.DataDir, "--log-level", "warn"}
	// The controller's PostgreSQL backends carry a name of their own, so
	// their CPU (the store's half of the work) is counted beside the
	// controller's.
	appName := "mesh-fanout-" + port
	if cfg.DatabaseURL != "" {
		args = append(args, "--database", cfg.DatabaseURL+"&application_name="+appName)
	}
	// MESH_BENCH_PPROF=DIR profiles the controller's CPU during each
	// fan-out (through --pprof) into DIR/<dialect>-<first|second>-<n>.pprof,
	// and during the reports after them into <dialect>-reports-<n>.pprof.
	// --pprof is served always: its heap profile with gc=1 is how the
	// memory of the waiting polls is measured after a collection.
	profDir := os.Getenv("MESH_BENCH_PPROF")
	pp := freePort(b)
	args = append(args, "--pprof", "127.0.0.1:"+pp)
	collectURL := "http://127.0.0.1:" + pp + "/debug/pprof/heap?gc=1"
	pprofURL := ""
	if profDir != "" {
		pprofURL = "http://127.0.0.1:" + pp + "/debug/pprof/profile?seconds="
	}
	if tls {
		args = append(args, "--tls")
	}
	ctl := exec.Command(filepath.Join(bin, "mesh-controller"), args...)
	banner := &syncBuffer{}
	ctl.Stdout, ctl.Stderr = banner, os.Stderr
	started := time.Now()
	if err := ctl.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ctl.Process.Signal(os.Interrupt); _ = ctl.Wait() }()
	var pin string
	if tls {
		url, pin = "https://127.0.0.1:"+port, trustCA(b, port, banner)
		defer func() { hc = http.DefaultClient }()
	}
	waitUntil(b, 30*time.Second+time.Duration(machines)*time.Millisecond, func() bool { return metric(url, "mesh_hub_machines") == float64(machines) })
	if large != nil {
		large.startMs = float64(time.Since(started).Microseconds()) / 1000
		b.ReportMetric(large.startMs, "start-ms")
	}
	baseRSS := rss(b, ctl.Process.Pid)
	baseLive := liveMemory(b, url, collectURL)

	load := exec.Command(filepath.Join(bin, "loadgen"), "-url", url, "-tokens", tokens,
		"-pubkey", base64.StdEncoding.EncodeToString(pub), "-admin", admin, "-module", "mod", "-sources", strconv.Itoa(sources), "-ca-pin", pin,
		// MESH_BENCH_ENVELOPE= (set, empty) measures hosts that do not
		// verify batch envelopes: each 200 signs and stores its single one.
		"-envelope", envOr("MESH_BENCH_ENVELOPE", models.EnvelopeBatch),
		// MESH_BENCH_KEEP=false: each poll on a connection of its own
		// (the hosts poll again on the connection an answer left open).
		"-keep="+envOr("MESH_BENCH_KEEP", "true"))
	if profDir != "" {
		load.Args = append(load.Args, "-cpuprofile", filepath.Join(profDir, "loadgen-"+port))
	}
	stdin, _ := load.StdinPipe()
	stdout, _ := load.StdoutPipe()
	load.Stderr = os.Stderr
	if err := load.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = load.Wait() }()
	lines := bufio.NewScanner(stdout)
	expect := func(prefix string) string {
		if !lines.Scan() || !strings.HasPrefix(lines.Text(), prefix) {
			b.Fatalf("loadgen said %q, want %s", lines.Text(), prefix)
		}
		return strings.TrimPrefix(lines.Text(), prefix)
	}

	// profileCPU, with MESH_BENCH_PPROF, profiles the controller's CPU for
	// 6 s from now into DIR/<dialect>-<what>-<n>.pprof, starting 200 ms
	// ahead of what it measures; wait waits for the profile's end.
	profileCPU := func(what string) (wait func()) {
		if pprofURL == "" {
			return func() {}
		}
		profiled := make(chan struct{})
		go func() {
			defer close(profiled)
			profile(b, pprofURL+"6", filepath.Join(profDir, fmt.Sprintf("%s-%s-%d.pprof", dialect, what, time.Now().UnixNano())))
		}()
		time.Sleep(200 * time.Millisecond) // the profile starts before what it measures (a measurement, not a wait for a state)
		return func() { <-profiled }
	}
	// allocs, with MESH_BENCH_PPROF, saves the heap's allocations so far
	// into DIR/<dialect>-<what>-allocs-<when>.pprof, after a collection:
	// taken before and after what is measured, pprof -base before after
	// gives what it allocated. It is asked for as heap, the same profile:
	// net/http/pprof collects first (gc=1) for that name only, and an
	// allocs profile taken without one counted the polls' arrival as the
	// fan-out's.
	allocs := func(what, when string) {
		if pprofURL != "" {
			profile(b, strings.Replace(pprofURL, "profile?seconds=", "heap?gc=1", 1), filepath.Join(profDir, fmt.Sprintf("%s-%s-allocs-%s.pprof", dialect, what, when)))
		}
	}
	// pgCPUSince is the CPU the controller's PostgreSQL backends used
	// since they used pg0 (backendsCPU).
	pgCPUSince := func(pg0 map[int]time.Duration) time.Duration {
		d := time.Duration(0)
		for pid, c := range backendsCPU(b, cfg.DatabaseURL, appName) {
			d += c - pg0[pid]
		}
		return d
	}
	// reports has every host the last fan-out answered report that it
	// applied, all at once: what storing the wave of reports that follows
	// a change costs.
	reports := func() {
		allocs("reports", "before")
		defer allocs("reports", "after")
		defer profileCPU("reports")()
		cpu0 := cpuTime(b, ctl.Process.Pid)
		pg0 := backendsCPU(b, cfg.DatabaseURL, appName)
		fmt.Fprintln(stdin, "report")
		var r struct {
			Reports, Stored int
			P50Ms           float64 `json:"p50_ms"`
			P99Ms           float64 `json:"p99_ms"`
			AllMs           float64 `json:"all_ms"`
			CPUMs           float64 `json:"cpu_ms"`
			FirstError      string  `json:"first_error"`
		}
		if err := json.Unmarshal([]byte(expect("reported ")), &r); err != nil {
			b.Fatal(err)
		}
		ctlCPU := cpuTime(b, ctl.Process.Pid) - cpu0
		pgCPU := pgCPUSince(pg0)
		pg := ""
		if cfg.DatabaseURL != "" {
			pg = fmt.Sprintf(", PostgreSQL's backends %v", pgCPU.Round(time.Millisecond))
		}
		b.Logf("%s reports: %d of %d stored; p50 %.0f ms, p99 %.0f ms, the last %.0f ms; CPU: controller %v%s, load process %.0f ms %s",
			dialect, r.Stored, r.Reports, r.P50Ms, r.P99Ms, r.AllMs, ctlCPU.Round(time.Millisecond), pg, r.CPUMs, r.FirstError)
		if r.Reports != fanoutHosts || r.Stored != r.Reports {
			b.Fatalf("%d of %d hosts reported, %d stored", r.Reports, fanoutHosts, r.Stored)
		}
		b.ReportMetric(r.AllMs, "reports-ms")
		b.ReportMetric(float64(ctlCPU.Microseconds())/float64(r.Reports), "cpu-µs/report")
		if cfg.DatabaseURL != "" {
			b.ReportMetric(float64(pgCPU.Microseconds())/float64(r.Reports), "pg-cpu-µs/report")
		}
	}
	round := func(label string, gen, build int) {
		fmt.Fprintf(stdin, "open %d\n", gen)
		expect("opened")
		// A run that stops short says how short (once, at 10,000 TLS
		// polls, two connections were established but never parked).
		open := -1.0
		defer func() {
			if b.Failed() && open != float64(fanoutHosts) {
				b.Logf("%s %s: %.0f of %d polls open", dialect, label, open, fanoutHosts)
			}
		}()
		waitUntil(b, 120*time.Second+time.Duration(n)*time.Millisecond, func() bool {
			open = metric(url, "mesh_polls_open")
			return open == float64(fanoutHosts)
		})
		if label == "first" {
			// The memory a waiting poll holds is the live heap and stacks
			// it adds, each side measured after a collection. The RSS
			// difference is logged beside it but is not the figure: the
			// runtime returns freed memory to the kernel at its own pace,
			// so at 100,000 machines the garbage of loading them was
			// still resident before the polls and partly returned after,
			// and the difference came out below zero.
			perPoll := (liveMemory(b, url, collectURL) - baseLive) / float64(fanoutHosts)
			rssPerPoll := float64(rss(b, ctl.Process.Pid)-baseRSS) / float64(fanoutHosts)
			b.ReportMetric(perPoll/1024, "KiB/poll")
			b.Logf("%s: %.1f KiB of live memory more per waiting poll (heap in use %.0f MiB, stacks %.0f MiB, goroutines %.0f after a collection); controller RSS %d MiB before the polls, %.1f KiB more per poll",
				dialect, perPoll/1024, metric(url, "go_memstats_heap_inuse_bytes")/(1<<20),
				metric(url, "go_memstats_stack_inuse_bytes")/(1<<20), metric(url, "go_goroutines"), baseRSS>>20, rssPerPoll/1024)
		}
		profiled := profileCPU(label)
		var composed chan float64
		if large != nil {
			composed = large.composeAll(b, url, fanoutHosts)
		}
		allocs(label, "before")
		cpu0 := cpuTime(b, ctl.Process.Pid)
		pg0 := backendsCPU(b, cfg.DatabaseURL, appName)
		fmt.Fprintf(stdin, "fire %d\n", build)
		var r struct {
			Polls, OK, Verified, Errors int
			FirstMs                     float64 `json:"first_ms"`
			P50Ms                       float64 `json:"p50_ms"`
			P99Ms                       float64 `json:"p99_ms"`
			MaxMs                       float64 `json:"max_ms"`
			ChangeMs                    float64 `json:"change_ms"`
			CPUMs                       float64 `json:"cpu_ms"`
			FirstError                  string  `json:"first_error"`
			Retries                     int
		}
		if err := json.Unmarshal([]byte(expect("result ")), &r); err != nil {
			b.Fatal(err)
		}
		ctlCPU := cpuTime(b, ctl.Process.Pid) - cpu0
		allocs(label, "after")
		pgCPU := pgCPUSince(pg0)
		if cfg.DatabaseURL != "" {
			b.Logf("%s %s fan-out: PostgreSQL backends' CPU %v", dialect, label, pgCPU.Round(time.Millisecond))
			b.ReportMetric(float64(pgCPU.Microseconds())/float64(fanoutHosts), label+"-pg-cpu-µs/machine")
		}
		b.Logf("%s %s fan-out: %d polls, %d ok, %d verified; change answered %.0f ms, first poll %.0f ms, p50 %.0f ms, p99 %.0f ms, max %.0f ms; CPU: controller %v, load process %.0f ms; controller peak RSS %d MiB; %d polls made again before the change %s",
			dialect, label, r.Polls, r.OK, r.Verified, r.ChangeMs, r.FirstMs, r.P50Ms, r.P99Ms, r.MaxMs, ctlCPU.Round(time.Millisecond), r.CPUMs, peakRSS(b, ctl.Process.Pid)>>20, r.Retries, r.FirstError)
		if large != nil {
			// Every machine's declaration composed, signed, recorded and
			// answered: the last host's answer bounds composing them all.
			b.ReportMetric(r.MaxMs, label+"-all-ms")
			ms := <-composed
			b.ReportMetric(ms, label+"-compose-all-ms")
			b.Logf("%s %s: every one of the %d polling machines composed ahead %.0f ms after the change was sent", dialect, label, fanoutHosts, ms)
		}
		if r.Verified != fanoutHosts {
			b.Fatalf("%d of %d envelopes verified", r.Verified, fanoutHosts)
		}
		b.ReportMetric(r.P50Ms, label+"-p50-ms")
		b.ReportMetric(r.P99Ms, label+"-p99-ms")
		b.ReportMetric(float64(ctlCPU.Microseconds())/float64(fanoutHosts), label+"-cpu-µs/machine")
		profiled()
	}
	round("first", 1, 2)
	round("second", 2, 1)
	// After both fan-outs, so that each is measured as it always was.
	reports()
	if large != nil {
		large.pages(b, url, admin)
	}

	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sends, err := st.CountSends(context.Background())
	if err != nil || sends != int64(2*fanoutHosts) {
		b.Fatalf("%d send rows after two fan-outs to %d hosts (%v)", sends, fanoutHosts, err)
	}
}

// seed makes n machines assigned one module with two builds, mints the
// host tokens of the first hosts of them and an admin's, and returns the
// declaration public key.
func seed(b *testing.B, cfg store.Config, n, hosts int) (admin string, pub ed25519.PublicKey, tokensFile string) {
	ctx := context.Background()
	st, err := store.Open(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	dk, err := st.EnsureKey(ctx, "k1", store.KeyDeclaration)
	if err != nil {
		b.Fatal(err)
	}
	tk, err := st.EnsureKey(ctx, "t1", store.KeyToken)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.CreateUser(ctx, "bench", &models.User{Name: "admin", Role: models.RoleAdmin, PasswordHash: "x"}); err != nil {
		b.Fatal(err)
	}
	if err := st.CreateModule(ctx, "bench", &models.Module{Name: "mod", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
		b.Fatal(err)
	}
	man := benchManifest(envInt("MESH_BENCH_RESOURCES", 1))
	for range 2 {
		if err := st.CreateBuild(ctx, "bench", "mod", &models.Build{Manifest: man}, nil); err != nil {
			b.Fatal(err)
		}
	}
	mod, _ := st.Module(ctx, "mod")
	now := time.Now().UTC()
	ms := make([]models.Machine, n)
	for i := range ms {
		ms[i] = models.Machine{Name: fmt.Sprintf("m%05d", i), OS: "linux", Arch: "amd64", HostVersion: "1.0.0", Schema: "1",
			Generation: 1, GenerationTrigger: models.TriggerEnrol, GenerationAt: now, Running: "{}", TokenID: "t", CreatedAt: now}
	}
	db := st.DB()
	if err := db.CreateInBatches(&ms, 500).Error; err != nil {
		b.Fatal(err)
	}
	as := make([]models.Assignment, n)
	for i, m := range ms {
		as[i] = models.Assignment{MachineID: m.ID, ModuleID: mod.ID, CreatedAt: now}
	}
	if err := db.CreateInBatches(&as, 500).Error; err != nil {
		b.Fatal(err)
	}
	if cfg.DatabaseURL != "" {
		// Statistics, as autovacuum gathers them within a minute of a
		// fleet's growth: planned without any (the rows written straight
		// in an instant ago), the first fan-out's reads took ~80 ms more.
		if err := db.Exec("ANALYZE").Error; err != nil {
			b.Fatal(err)
		}
	}
	auth := &auth.Authority{KeyID: tk.ID, Priv: ed25519.NewKeyFromSeed(tk.PrivateKey), Now: time.Now}
	admin, _, err = auth.IssuePerson("admin", models.RoleAdmin, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for _, m := range ms[:hosts] {
		tok, err := auth.IssueHost(m.Name, "t")
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(&sb, "%s %s\n", m.Name, tok)
	}
	tokensFile = filepath.Join(b.TempDir(), "tokens")
	if err := os.WriteFile(tokensFile, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	return admin, ed25519.PublicKey(dk.PublicKey), tokensFile
}

// backendsCPU is the CPU each PostgreSQL backend named app has used so
// far, by pid (nothing on SQLite).
func backendsCPU(b *testing.B, url, app string) map[int]time.Duration {
	out := map[int]time.Duration{}
	if url == "" {
		return out
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			out[pid] = time.Duration(u+s) * 10 * time.Millisecond
		}
	}
	return out
}

// profile saves the controller's CPU profile from url into file.
func profile(b *testing.B, url, file string) {
	resp, err := http.Get(url)
	if err != nil {
		b.Error(err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(file, body, 0o644)
	}
	if err != nil {
		b.Error(err)
	}
}

// hc is the client of the controller's API: the default one, or one that
// trusts the mesh CA of the controller being measured (trustCA); the
// benchmarks run one at a time.
var hc, defaultClient = http.DefaultClient, http.DefaultClient

// trustCA reads the mesh CA's pin from the controller's banner, finds the
// CA by it as a host does, makes hc trust it alone, and returns the pin.
func trustCA(b *testing.B, port string, banner *syncBuffer) string {
	pinRE := regexp.MustCompile(`TLS: +on, mesh CA pin (sha256:[0-9a-f]{64})`)
	waitUntil(b, 30*time.Second, func() bool { return pinRE.MatchString(banner.String()) })
	pin := pinRE.FindStringSubmatch(banner.String())[1]
	ca, err := meshca.Discover(context.Background(), "127.0.0.1:"+port, "127.0.0.1", pin)
	if err != nil {
		b.Fatalf("finding the pinned CA: %v", err)
	}
	hc = &http.Client{Transport: &http.Transport{TLSClientConfig: meshca.ClientConfig(ca)}}
	return pin
}

// syncBuffer is the controller's stdout, written by its pipe's copier
// while the benchmark reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// metric reads one gauge from /metrics; -1 when unreadable.
func metric(url, name string) float64 {
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func rss(b *testing.B, pid int) int64 { return procStatus(b, pid, "VmRSS") }

// liveMemory is the controller's heap in use and goroutine stacks, in
// bytes, just after a collection it is asked for (collectURL, its heap
// profile with gc=1).
func liveMemory(b *testing.B, url, collectURL string) float64 {
	resp, err := hc.Get(collectURL)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %s (no collection, so no measure of live memory)", collectURL, resp.Status)
	}
	heap, stacks := metric(url, "go_memstats_heap_inuse_bytes"), metric(url, "go_memstats_stack_inuse_bytes")
	if heap < 0 || stacks < 0 {
		b.Fatal("no go_memstats_heap_inuse_bytes or go_memstats_stack_inuse_bytes in /metrics")
	}
	return heap + stacks
}

// peakRSS is a process's resident set at its largest so far.
func peakRSS(b *testing.B, pid int) int64 { return procStatus(b, pid, "VmHWM") }

// procStatus is a size field of a process's /proc status, in bytes.
func procStatus(b *testing.B, pid int, field string) int64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(s)
	if m == nil {
		b.Fatal("no " + field)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb * 1024
}

// cpuTime is the CPU a process has used so far, user and system (it
// includes the verifying the load process does after the last answer).
func cpuTime(b *testing.B, pid int) time.Duration {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th, in clock ticks (100 per second).
	f := strings.Fields(string(s[strings.LastIndexByte(string(s), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

func waitUntil(b *testing.B, d time.Duration, cond func() bool) {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("condition not met within %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
