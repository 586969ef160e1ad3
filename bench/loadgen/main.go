// Command loadgen is the load side of the benchmarks that need one: a
// process of its own that speaks to the controller over real TCP.
//
// With -mode fanout (the default) it holds thousands of host long polls,
// triggers one change, and measures how long each poll takes to get its
// 200. It verifies every envelope it receives. It reads commands on stdin,
// one per line:
//
//	open GEN     open a poll per host with If-None-Match GEN
//	fire BUILD   make BUILD current (bumping every host), wait for every
//	             poll, verify, print "result {json}"
//	report       every host answered by the last fire reports it applied
//	             (all at once, at most reportsInFlight at a time, on the
//	             connection its answer left open, as each host's next
//	             request after its apply), print "reported {json}"
//
// With -mode hold every host polls again as soon as answered (hold.go).
//
// With -mode flood it floods the controller with one machine's long polls
// while another machine's host waits for its change (see flood.go).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mesh/meshca"
	"mesh/models"
)

type host struct{ name, token string }

// sources is how many loopback source addresses the polls are spread over.
var sources = 1

// caPin, when set, is the mesh CA's pin of a controller serving TLS;
// tlsConfig trusts that CA alone, found by its pin as a host finds it.
var (
	caPin     string
	tlsConfig *tls.Config
)

// dialing bounds the polls being dialled at once: 100,000 SYNs at once
// overflow the controller's accept queue, and the retransmits (1 s, 3 s)
// would be measured as the controller's slowness.
var dialing = make(chan struct{}, 1000)

// raiseFileLimit lifts this process's open-file limit to at least n; as
// root the hard limit too (a poll holds one descriptor).
func raiseFileLimit(n int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fail(err)
	}
	if lim.Cur >= uint64(n) {
		return
	}
	lim.Cur = uint64(n)
	lim.Max = max(lim.Max, lim.Cur)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fail(fmt.Errorf("raising the open-file limit to %d: %w", n, err))
	}
}

type outcome struct {
	done   time.Time
	status int
	etag   string
	send   string // the answer's X-Mesh-Send
	body   []byte
	err    error
}

// Result is what one fan-out measured.
type Result struct {
	Polls      int     `json:"polls"`
	OK         int     `json:"ok"`
	Verified   int     `json:"verified"`
	Errors     int     `json:"errors"`
	FirstMs    float64 `json:"first_ms"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	ChangeMs   float64 `json:"change_ms"` // until the change's own request was answered
	CPUMs      float64 `json:"cpu_ms"`    // this load process's CPU from the change to the last answer
	FirstError string  `json:"first_error,omitempty"`
	Retries    int     `json:"retries"` // polls made again after failing before the change
}

// fired is set once the change is made; retries counts the polls made
// again before it.
var (
	fired   atomic.Bool
	retries atomic.Int64
)

func main() {
	mode := flag.String("mode", "fanout", "fanout, flood or hold")
	var hc holdConfig
	flag.StringVar(&hc.wait, "wait", "240s", "hold: each poll's wait")
	flag.BoolVar(&hc.resume, "resume", false, "hold: each host keeps a TLS session cache (resumes its session)")
	flag.BoolVar(&hc.keep, "keep", true, "hold, fanout: each host polls again on the connection its last answer left open, as a host's HTTP client does (false: each poll on a connection of its own)")
	flag.Int64Var(&hc.gen, "hold-gen", 1, "hold: the generation the hosts have")
	url := flag.String("url", "", "controller URL")
	tokens := flag.String("tokens", "", "file of 'name token' lines")
	pub := flag.String("pubkey", "", "fanout: the declaration key, base64")
	admin := flag.String("admin", "", "an operator's bearer token")
	module := flag.String("module", "", "fanout: the module to make current")
	var fl floodConfig
	flag.IntVar(&fl.conns, "conns", 5000, "flood: connections polling with the attacker's token")
	flag.BoolVar(&fl.loop, "loop", false, "flood: each connection polls again as soon as answered, rather than once")
	flag.StringVar(&fl.attacker, "attacker", "", "flood: the machine whose token floods")
	flag.StringVar(&fl.victim, "victim", "", "flood: the machine whose host waits for its change")
	flag.Int64Var(&fl.gen, "gen", 1, "flood: both machines' current generation")
	flag.StringVar(&caPin, "ca-pin", "", "fanout: the controller serves TLS under the mesh CA of this pin (https URL); each poll's connection makes its own handshake")
	flag.StringVar(&envelopeHeader, "envelope", models.EnvelopeBatch, "the X-Mesh-Envelope each poll sends (empty: none, as a host that verifies only single-signature envelopes)")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "fanout: write the load process's CPU profile of each fan-out (from the change to the last answer) to this path, suffixed -1, -2, …")
	flag.IntVar(&sources, "sources", 1, "fanout: loopback source addresses to spread the polls over, 127.0.0.1 up (one address has ~28,000 ephemeral ports)")
	flag.Parse()
	hosts := readHosts(*tokens)
	raiseFileLimit(len(hosts) + 1000)
	switch *mode {
	case "fanout":
		fanout(*url, hosts, *pub, *admin, *module, hc.keep)
	case "flood":
		fl.url, fl.admin, fl.hosts = *url, *admin, hosts
		flood(fl)
	case "hold":
		hc.url, hc.hosts = *url, hosts
		hold(hc)
	default:
		fail(fmt.Errorf("-mode %q: fanout, flood or hold", *mode))
	}
}

func fanout(url string, hosts []host, pub, admin, module string, keep bool) {
	key, err := base64.StdEncoding.DecodeString(pub)
	if err != nil {
		fail(err)
	}
	addr := strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
	if caPin != "" {
		setupTLS(addr)
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: len(hosts) + 10, MaxIdleConns: len(hosts) + 10,
		DialContext:     (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
		TLSClientConfig: tlsConfig,
	}}
	var results []outcome
	conns := make([]holdConn, len(hosts)) // what each host's last answer left open
	var wg sync.WaitGroup
	var gen int64
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "open":
			gen, _ = strconv.ParseInt(arg, 10, 64)
			results = make([]outcome, len(hosts))
			fired.Store(false)
			retries.Store(0)
			for i, h := range hosts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A poll that fails before the change is made is made
					// again, as a host would: under 10,000 TLS handshakes
					// at once a few connections are lost before they park.
					for try := 1; ; try++ {
						results[i] = pollOnce(addr, h, gen, i%sources, keep, &conns[i])
						if results[i].err == nil || fired.Load() || try == 5 {
							break
						}
						if retries.Add(1) <= 3 {
							fmt.Fprintf(os.Stderr, "loadgen: %s: poll before the change failed (made again): %v\n", h.name, results[i].err)
						}
					}
				}()
			}
			fmt.Println("opened")
		case "fire":
			fired.Store(true)
			stop := profile()
			start, cpu0 := time.Now(), cpuTime()
			req, _ := http.NewRequest("POST", url+"/api/v1/modules/"+module+"/current", strings.NewReader(`{"build": `+arg+`, "reason": "the benchmark's change goes back and forth"}`))
			req.Header.Set("Authorization", "Bearer "+admin)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				fail(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			changed := time.Since(start)
			if resp.StatusCode != 200 {
				fail(fmt.Errorf("make current: %d %s", resp.StatusCode, b))
			}
			wg.Wait()
			cpu := cpuTime() - cpu0
			stop()
			r := measure(hosts, results, start, key, gen+1)
			r.CPUMs = float64(cpu.Microseconds()) / 1000
			r.ChangeMs = float64(changed.Microseconds()) / 1000
			r.Retries = int(retries.Load())
			j, _ := json.Marshal(r)
			fmt.Println("result " + string(j))
		case "report":
			j, _ := json.Marshal(reportAll(addr, hosts, results, conns, gen+1, keep))
			fmt.Println("reported " + string(j))
		default:
			fail(fmt.Errorf("unknown command %q", cmd))
		}
	}
}

// cpuProfile is where -cpuprofile writes; fanouts counts the profiles.
var (
	cpuProfile string
	fanouts    int
)

// profile starts the fan-out's CPU profile when asked for one; the
// function it returns stops it.
func profile() func() {
	if cpuProfile == "" {
		return func() {}
	}
	fanouts++
	f, err := os.Create(fmt.Sprintf("%s-%d", cpuProfile, fanouts))
	if err != nil {
		fail(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fail(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// pollOnce holds one host's poll, on the connection hc holds when there is
// one (the answer to its last poll left it open), else on a new one. It
// speaks HTTP/1.1 directly rather than through http.Client: the load
// process shares this machine's CPUs with the controller, and a
// transport's two goroutines and connection pool per host would take CPU
// from the side being measured. Without keep the poll asks the controller
// to close the connection after its answer.
func pollOnce(addr string, h host, gen int64, source int, keep bool, hc *holdConn) outcome {
	resp, b, err := exchange(hc, addr, source, tlsConfig, pollRequest(addr, h.token, gen, "240s"), keep, nil)
	if resp == nil {
		return outcome{done: time.Now(), err: err}
	}
	return outcome{done: time.Now(), status: resp.StatusCode, etag: resp.Header.Get("ETag"), send: resp.Header.Get(headerSend), body: b, err: err}
}

// envelopeHeader is the X-Mesh-Envelope the polls send: today's host
// sends "batch" and verifies batch envelopes.
var envelopeHeader = models.EnvelopeBatch

// pollRequest is a host's long poll, raw HTTP/1.1.
func pollRequest(addr, token string, gen int64, wait string) string {
	env := ""
	if envelopeHeader != "" {
		env = "\r\n" + models.HeaderEnvelope + ": " + envelopeHeader
	}
	return "GET /api/v1/host/declaration?wait=" + wait + " HTTP/1.1\r\nHost: " + addr +
		"\r\nAuthorization: Bearer " + token +
		"\r\nIf-None-Match: \"" + strconv.FormatInt(gen, 10) + "\"" +
		"\r\nX-Mesh-Host-Version: 1.0.0\r\nX-Mesh-Schema: 1" + env + "\r\n\r\n"
}

// measure computes latencies from start and verifies every envelope after
// the fact, so verifying does not compete with the server while it answers.
func measure(hosts []host, rs []outcome, start time.Time, key ed25519.PublicKey, want int64) Result {
	r := Result{Polls: len(rs)}
	var lat []float64
	for i, o := range rs {
		if o.err != nil || o.status != 200 {
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = fmt.Sprintf("%s: status %d %v %.200s", hosts[i].name, o.status, o.err, o.body)
			}
			continue
		}
		r.OK++
		lat = append(lat, float64(o.done.Sub(start).Microseconds())/1000)
		// The host's own check: either envelope format, strictly.
		var p models.DeclarationPayload
		payload, err := models.OpenEnvelope(o.body, func(_ string, msg, sig []byte) bool { return ed25519.Verify(key, msg, sig) })
		if err != nil {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.DisallowUnknownFields()
		if dec.Decode(&p) != nil || p.Machine != hosts[i].name || p.Generation != want {
			continue
		}
		r.Verified++
	}
	r.FirstMs, r.P50Ms, r.P99Ms, r.MaxMs = spread(lat)
	return r
}

// spread sorts latencies and gives the first, the median, the 99th
// percentile and the last (all 0 when there are none).
func spread(lat []float64) (first, p50, p99, last float64) {
	if len(lat) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(lat)
	return lat[0], lat[len(lat)*50/100], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
}

// headerSend names the send an answer is, which its host's report names.
const headerSend = "X-Mesh-Send"

// Reported is what one wave of reports measured.
type Reported struct {
	Reports    int     `json:"reports"`
	Stored     int     `json:"stored"` // answered 201
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	AllMs      float64 `json:"all_ms"` // until the last was answered
	CPUMs      float64 `json:"cpu_ms"`
	FirstError string  `json:"first_error,omitempty"`
}

// reportsInFlight bounds the wave: at 100,000 hosts all at once would
// measure this machine's memory more than the controller.
const reportsInFlight = 10000

// reportAll has every host that was answered 200 report that it applied
// generation gen, all at once: the wave of reports that follows a change
// at its steepest (a real fleet's spreads over its hosts' applies). A
// kept connection the controller closed meanwhile is dialled again once,
// as a host's HTTP client would.
func reportAll(addr string, hosts []host, rs []outcome, conns []holdConn, gen int64, keep bool) Reported {
	start, cpu0 := time.Now(), cpuTime()
	var who []int // the hosts answered 200, which report
	for i, o := range rs {
		if o.status == 200 && o.send != "" {
			who = append(who, i)
		}
	}
	type got struct {
		done   time.Time
		status int
		body   []byte
		err    error
	}
	gots := make([]got, len(who))
	var wg sync.WaitGroup
	slots := make(chan struct{}, reportsInFlight)
	for k, i := range who {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			body := `{"send":"` + rs[i].send + `","generation":` + strconv.FormatInt(gen, 10) +
				`,"outcome":"applied","host_version":"1.0.0","running":{"mod":{"build":1}}}`
			req := "POST /api/v1/host/reports HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + hosts[i].token +
				"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			kept := conns[i].c != nil
			resp, b, err := exchange(&conns[i], addr, i%sources, tlsConfig, req, keep, nil)
			if err != nil && kept {
				resp, b, err = exchange(&conns[i], addr, i%sources, tlsConfig, req, keep, nil)
			}
			gots[k] = got{done: time.Now(), body: b, err: err}
			if resp != nil {
				gots[k].status = resp.StatusCode
			}
		})
	}
	wg.Wait()
	r := Reported{Reports: len(who), CPUMs: float64((cpuTime() - cpu0).Microseconds()) / 1000}
	var lat []float64
	for k, g := range gots {
		if g.err != nil || g.status != 201 {
			if r.FirstError == "" {
				r.FirstError = fmt.Sprintf("%s: status %d %v %.200s", hosts[who[k]].name, g.status, g.err, g.body)
			}
			continue
		}
		r.Stored++
		lat = append(lat, float64(g.done.Sub(start).Microseconds())/1000)
	}
	_, r.P50Ms, r.P99Ms, r.AllMs = spread(lat)
	return r
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// discoverTLS trusts the mesh CA of caPin alone, found by its pin.
func discoverTLS(addr, host string) *tls.Config {
	ca, err := meshca.Discover(context.Background(), addr, host, caPin)
	if err != nil {
		fail(err)
	}
	c := meshca.ClientConfig(ca)
	c.ServerName = host
	return c
}

func readHosts(path string) []host {
	b, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	var hs []host
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		n, t, _ := strings.Cut(l, " ")
		hs = append(hs, host{n, t})
	}
	return hs
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(1)
}
