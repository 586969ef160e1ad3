package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
)

// BenchmarkFanoutLarge: 100,000 machines on one controller (issue 17).
// It runs only when MESH_BENCH_LARGE gives the number of machines (e.g.
// 100000, or 2000 for a quick smoke), on PostgreSQL unless
// MESH_BENCH_DIALECT says sqlite. Besides the fan-out's figures it
// reports the controller's start time with every machine loaded, the time
// until the last host has its declaration, and the machine list API's and
// the overview page's times at that size. The polls come from a separate
// load process over at least four loopback source addresses; both
// processes raise their open-file limits (the controller as root raises
// the hard one; its connection cap follows the limit, --max-conns 0).
// Where the hard limit cannot be raised, as many hosts poll as it allows.
func BenchmarkFanoutLarge(b *testing.B) {
	n := envInt("MESH_BENCH_LARGE", 0)
	if n == 0 {
		b.Skip("MESH_BENCH_LARGE=100000 runs it")
	}
	dialect := store.Postgres
	if os.Getenv("MESH_BENCH_DIALECT") == store.SQLite {
		dialect = store.SQLite
	}
	bin := b.TempDir()
	build(b, bin, "mesh-controller", "./cmd/mesh-controller")
	build(b, bin, "loadgen", "./bench/loadgen")
	// MESH_BENCH_POLLS holds fewer polls than machines on purpose.
	allowed, why := pollsAllowed(b, n)
	polls := min(allowed, envInt("MESH_BENCH_POLLS", n))
	b.Run(fmt.Sprintf("%s-%d", dialect, n), func(b *testing.B) {
		if why != "" {
			b.Log(why)
		}
		for range b.N {
			fanout(b, bin, dialect, false, n, polls, &largeRun{})
		}
	})
}

// pollsAllowed is how many of n hosts can hold a poll here: each poll is a
// descriptor in the controller and one in the load process, and both
// inherit this process's limits. As root with CAP_SYS_RESOURCE the hard
// limit is raised to fit them all; without it (a container may withhold
// it) the polls are capped below the hard limit, and why says so.
func pollsAllowed(b *testing.B, n int) (polls int, why string) {
	const reserve = 1000 // the store, files, probes, /metrics
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	want := uint64(n + reserve)
	if lim.Max < want {
		err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want})
		if err != nil {
			polls := min(n, int(lim.Max)-reserve)
			return polls, fmt.Sprintf("the open-file hard limit %d cannot be raised to %d (%v): %d of %d machines poll", lim.Max, want, err, polls, n)
		}
		return n, ""
	}
	if lim.Cur < want {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: lim.Max}); err != nil {
			b.Fatal(err)
		}
	}
	return n, ""
}

// composeAll times, from now, until the controller has composed ahead
// every one of the polling machines for a change (only the machines whose
// hosts poll are composed ahead; mesh_composed_ahead_total counts them),
// and sends the milliseconds on the channel it returns (-1 past two
// minutes).
func (l *largeRun) composeAll(b *testing.B, url string, machines int) chan float64 {
	base := metric(url, "mesh_composed_ahead_total")
	done := make(chan float64, 1)
	start := time.Now()
	go func() {
		for time.Since(start) < 2*time.Minute {
			if metric(url, "mesh_composed_ahead_total") >= base+float64(machines) {
				done <- float64(time.Since(start).Microseconds()) / 1000
				return
			}
			time.Sleep(20 * time.Millisecond) // sampling a counter, not waiting for a state
		}
		done <- -1
	}()
	return done
}

// largeRun is what the large benchmark measures beside the fan-out.
type largeRun struct{ startMs float64 }

// pages times the machine list API, page by page through the whole fleet
// at 500 a page (its most), and the overview page a few times.
func (l *largeRun) pages(b *testing.B, url, admin string) {
	get := func(path string, cookie bool) ([]byte, time.Duration) {
		req, _ := http.NewRequest("GET", url+path, nil)
		if cookie {
			req.AddCookie(&http.Cookie{Name: "mesh_session", Value: admin})
		} else {
			req.Header.Set("Authorization", "Bearer "+admin)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d %v %.200s", path, resp.StatusCode, err, body)
		}
		return body, took
	}
	var lat []float64
	seen, cursor := 0, ""
	for {
		path := "/api/v1/machines?limit=500"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		body, took := get(path, false)
		lat = append(lat, float64(took.Microseconds())/1000)
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			b.Fatal(err)
		}
		seen += len(page.Items)
		if page.NextCursor == "" || len(page.Items) == 0 {
			break
		}
		cursor = page.NextCursor
	}
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "list-p50-ms")
	b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "list-p99-ms")
	b.Logf("machine list: %d machines in %d pages of 500, p50 %.1f ms, p99 %.1f ms, max %.1f ms", seen, len(lat), lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1])
	// The first page of each state (the operator's "which machines are
	// behind"), three loads each: a state's page judges the fleet a batch
	// at a time until the page is full, so a rare state reads the most.
	var st []float64
	var each []string // one line: a benchmark's log is cut after ten
	for _, state := range models.MachineStates() {
		var one []float64
		for range 3 {
			_, took := get("/api/v1/machines?limit=500&state="+state, false)
			one = append(one, float64(took.Microseconds())/1000)
		}
		slices.Sort(one)
		each = append(each, fmt.Sprintf("%s %.1f", state, one[1]))
		st = append(st, one...)
	}
	slices.Sort(st)
	b.ReportMetric(st[len(st)-1], "state-page-max-ms")
	b.Logf("machine list, first page of each state (p50 of 3, ms): %s; max %.1f ms", strings.Join(each, ", "), st[len(st)-1])
	var ov []float64
	for range 5 {
		_, took := get("/", true)
		ov = append(ov, float64(took.Microseconds())/1000)
	}
	slices.Sort(ov)
	b.ReportMetric(ov[len(ov)/2], "overview-ms")
	b.Logf("overview page: p50 %.1f ms, max %.1f ms over %d loads; controller start %.0f ms", ov[len(ov)/2], ov[len(ov)-1], len(ov), l.startMs)
}
