package main

// The flood: thousands of connections polling with one machine's (the
// attacker's) token while another machine's (the victim's) host waits for
// its change. With -loop each connection sends its next poll as soon as
// the last is answered (redialling when the controller closes it);
// without, each sends one poll and then holds its connection open until
// the stop. Commands on stdin, one per line:
//
//	victim   open the victim's long poll; print "victim"
//	flood    open the flood's connections and send their polls; print
//	         "flooding {json}" once every connection has sent its first
//	change   change the victim's variables and wait for its poll's 200;
//	         print "changed {json}"
//	stop     close every flood connection; print "stopped {json}"

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type floodConfig struct {
	url, admin       string
	hosts            []host
	conns            int
	loop             bool
	attacker, victim string
	gen              int64
}

// victimWait bounds the wait for the victim's 200 after its change, and
// any command's wait for connections: the benchmark must stop by itself.
const victimWait = 30 * time.Second

// FloodStats counts what the flood's polls were answered.
type FloodStats struct {
	Conns        int     `json:"conns"`
	Requests     int64   `json:"requests"`
	NotModified  int64   `json:"not_modified"`
	Refused      int64   `json:"refused"` // 503: past the connection cap
	OtherStatus  int64   `json:"other_status"`
	Dials        int64   `json:"dials"`
	DialErrors   int64   `json:"dial_errors"`
	Errors       int64   `json:"errors"` // reads and writes that failed before the stop
	OpenMs       float64 `json:"open_ms"`
	RequestsPerS float64 `json:"requests_per_s"`
	FirstError   string  `json:"first_error,omitempty"`
}

// Changed is what the victim's change measured.
type Changed struct {
	PutMs    float64 `json:"put_ms"`    // until the PUT was answered
	VictimMs float64 `json:"victim_ms"` // until the victim's poll had its 200
	Status   int     `json:"status"`
	ETag     string  `json:"etag"`
	Error    string  `json:"error,omitempty"`
}

// flooder is the flood in progress: a slot per connection, so stop can
// close whatever each one holds at that moment.
type flooder struct {
	addr, req string
	loop      bool
	stopped   atomic.Bool
	stop      chan struct{} // closed with stopped set
	slots     []slot
	sent      sync.WaitGroup // every connection's first poll sent
	done      sync.WaitGroup
	start     time.Time

	requests, notModified, refused, other, dials, dialErrors, errors atomic.Int64
	firstErr                                                         atomic.Pointer[string]
}

type slot struct {
	mu sync.Mutex
	c  net.Conn
}

func flood(cfg floodConfig) {
	tokens := map[string]string{}
	for _, h := range cfg.hosts {
		tokens[h.name] = h.token
	}
	addr := strings.TrimPrefix(cfg.url, "http://")
	var victim chan outcome
	var f *flooder
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "victim":
			victim = make(chan outcome, 1)
			go func() { victim <- pollOnce(addr, host{cfg.victim, tokens[cfg.victim]}, cfg.gen, 0, false, &holdConn{}) }()
			fmt.Println("victim")
		case "flood":
			f = &flooder{addr: addr, req: pollRequest(addr, tokens[cfg.attacker], cfg.gen, "300s"), loop: cfg.loop,
				stop: make(chan struct{}), slots: make([]slot, cfg.conns), start: time.Now()}
			f.run()
			if !waitGroup(&f.sent, victimWait) {
				fail(fmt.Errorf("the flood's %d connections did not all send a poll within %v", cfg.conns, victimWait))
			}
			s := f.stats()
			s.OpenMs = ms(time.Since(f.start))
			printJSON("flooding", s)
		case "change":
			printJSON("changed", change(cfg, victim))
		case "stop":
			f.stopped.Store(true)
			close(f.stop)
			for i := range f.slots {
				f.slots[i].close()
			}
			if !waitGroup(&f.done, victimWait) {
				fail(fmt.Errorf("the flood's connections did not end within %v of the stop", victimWait))
			}
			s := f.stats()
			s.RequestsPerS = float64(s.Requests) / time.Since(f.start).Seconds()
			printJSON("stopped", s)
		default:
			fail(fmt.Errorf("unknown command %q", in.Text()))
		}
	}
}

// run starts a goroutine per connection.
func (f *flooder) run() {
	f.sent.Add(len(f.slots))
	f.done.Add(len(f.slots))
	for i := range f.slots {
		go func() {
			defer f.done.Done()
			f.poll(&f.slots[i])
		}()
	}
}

// poll polls on one connection until the stop, redialling when the
// controller closes it (an answer with Connection: close);
// without -loop it sends one poll and holds the connection.
func (f *flooder) poll(s *slot) {
	first := true
	defer func() {
		if first {
			f.sent.Done()
		}
	}()
	for !f.stopped.Load() {
		c, err := net.DialTimeout("tcp", f.addr, 10*time.Second)
		f.dials.Add(1)
		if err != nil {
			f.dialErrors.Add(1)
			f.fail(err)
			time.Sleep(10 * time.Millisecond) // an exhausted port range must not spin
			continue
		}
		if !s.hold(c, &f.stopped) {
			return
		}
		br := bufio.NewReader(c)
		for !f.stopped.Load() {
			if _, err := io.WriteString(c, f.req); err != nil {
				f.fail(err)
				break
			}
			f.requests.Add(1)
			if first {
				first = false
				f.sent.Done()
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				f.fail(err)
				break
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusNotModified:
				f.notModified.Add(1)
			case http.StatusServiceUnavailable:
				f.refused.Add(1)
			default:
				f.other.Add(1)
			}
			if resp.Close || !f.loop {
				break
			}
		}
		if !f.loop {
			<-f.stop // hold the connection, answered or not
		}
		s.close()
	}
}

// fail counts an error, unless it is the stop closing the connection.
func (f *flooder) fail(err error) {
	if f.stopped.Load() {
		return
	}
	f.errors.Add(1)
	msg := err.Error()
	f.firstErr.CompareAndSwap(nil, &msg)
}

func (f *flooder) stats() FloodStats {
	s := FloodStats{Conns: len(f.slots), Requests: f.requests.Load(), NotModified: f.notModified.Load(),
		Refused: f.refused.Load(), OtherStatus: f.other.Load(), Dials: f.dials.Load(),
		DialErrors: f.dialErrors.Load(), Errors: f.errors.Load()}
	if e := f.firstErr.Load(); e != nil {
		s.FirstError = *e
	}
	return s
}

// hold keeps c in the slot, or closes it if the flood has stopped.
func (s *slot) hold(c net.Conn, stopped *atomic.Bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stopped.Load() {
		c.Close()
		return false
	}
	s.c = c
	return true
}

func (s *slot) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		s.c.Close()
		s.c = nil
	}
}

// change makes the victim's generation newer (its variables, through the
// API as an operator would) and waits for the victim's poll to answer.
func change(cfg floodConfig, victim <-chan outcome) Changed {
	start := time.Now()
	body := `{"variables": {"flood": "` + strconv.FormatInt(start.UnixNano(), 10) + `"}}`
	req, _ := http.NewRequest("PUT", cfg.url+"/api/v1/machines/"+cfg.victim+"/variables", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+cfg.admin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("If-Match", `"`+strconv.FormatInt(cfg.gen, 10)+`"`)
	client := &http.Client{Timeout: victimWait}
	resp, err := client.Do(req)
	if err != nil {
		return Changed{Error: "PUT: " + err.Error()}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := Changed{PutMs: ms(time.Since(start))}
	if resp.StatusCode != http.StatusOK {
		r.Error = fmt.Sprintf("PUT: %d %.200s", resp.StatusCode, b)
		return r
	}
	select {
	case o := <-victim:
		r.VictimMs = ms(o.done.Sub(start))
		r.Status = o.status
		if o.err != nil {
			r.Error = o.err.Error()
		}
		r.ETag = o.etag
	case <-time.After(victimWait):
		r.Error = fmt.Sprintf("no answer to the victim's poll within %v of its change", victimWait)
	}
	return r
}

func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printJSON(prefix string, v any) {
	j, _ := json.Marshal(v)
	fmt.Println(prefix + " " + string(j))
}
