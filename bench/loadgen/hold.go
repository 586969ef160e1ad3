package main

// -mode hold: every host polls again as soon as its poll is answered, as
// an idle host does: with -keep on the connection the answer left open, as
// a host's HTTP client does, else each poll on a connection of its own
// (asking the controller to close it). It reads commands on stdin:
//
//	start    start every host's loop; prints "started"
//	mark     start counting again: polls, handshakes, and each host's
//	         first poll sent after the mark; prints "marked"
//	report   prints "result {json}": what was counted since the mark
//
// With -resume each host keeps a TLS session cache of its own, as a host
// does, so its handshakes after the first resume the session.

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

type holdConfig struct {
	url    string
	hosts  []host
	gen    int64
	wait   string
	resume bool
	keep   bool
}

// HoldResult is what was counted since the last mark.
type HoldResult struct {
	Hosts       int     `json:"hosts"`
	Reconnected int     `json:"reconnected"` // hosts that sent a poll since the mark
	P50Ms       float64 `json:"p50_ms"`      // per host, mark to its first poll sent (handshake done)
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	Polls       int64   `json:"polls"`      // polls answered (200 or 304)
	Handshakes  int64   `json:"handshakes"` // TLS handshakes completed
	Resumed     int64   `json:"resumed"`    // of them, resumed sessions
	Failures    int64   `json:"failures"`   // connections or polls that failed
	Seconds     float64 `json:"seconds"`    // since the mark
}

var (
	holdMark                                     atomic.Int64 // UnixNano of the last mark
	holdPolls, holdHS, holdResumed, holdFailures atomic.Int64
)

func hold(c holdConfig) {
	addr := strings.TrimPrefix(strings.TrimPrefix(c.url, "http://"), "https://")
	if caPin != "" {
		setupTLS(addr)
	}
	first := make([]atomic.Int64, len(c.hosts)) // ns from the mark; 0 = not yet
	holdMark.Store(time.Now().UnixNano())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "start":
			for i, h := range c.hosts {
				go holdLoop(addr, h, c, i, &first[i])
			}
			fmt.Println("started")
		case "mark":
			holdMark.Store(time.Now().UnixNano())
			for i := range first {
				first[i].Store(0)
			}
			holdPolls.Store(0)
			holdHS.Store(0)
			holdResumed.Store(0)
			holdFailures.Store(0)
			fmt.Println("marked")
		case "report":
			r := HoldResult{Hosts: len(c.hosts), Polls: holdPolls.Load(), Handshakes: holdHS.Load(),
				Resumed: holdResumed.Load(), Failures: holdFailures.Load(),
				Seconds: time.Since(time.Unix(0, holdMark.Load())).Seconds()}
			var lat []float64
			for i := range first {
				if ns := first[i].Load(); ns > 0 {
					lat = append(lat, float64(ns)/1e6)
				}
			}
			r.Reconnected = len(lat)
			_, r.P50Ms, r.P99Ms, r.MaxMs = spread(lat)
			j, _ := json.Marshal(r)
			fmt.Println("result " + string(j))
		default:
			fail(fmt.Errorf("unknown command %q", in.Text()))
		}
	}
}

// setupTLS finds the mesh CA by its pin, as a host does.
func setupTLS(addr string) {
	host, _, _ := net.SplitHostPort(addr)
	tlsConfig = discoverTLS(addr, host)
}

// holdLoop is one idle host: poll, and when answered poll again; after a
// failure (the controller away) try again after 200–400 ms.
func holdLoop(addr string, h host, c holdConfig, i int, first *atomic.Int64) {
	var conf *tls.Config
	if tlsConfig != nil {
		conf = tlsConfig.Clone()
		if c.resume {
			conf.ClientSessionCache = tls.NewLRUClientSessionCache(1)
		} else {
			conf.SessionTicketsDisabled = true
		}
	}
	gen := c.gen
	var hc holdConn
	for {
		etag, err := holdOnce(addr, h, gen, c.wait, i%sources, conf, first, c.keep, &hc)
		if err != nil {
			holdFailures.Add(1)
			time.Sleep(200*time.Millisecond + rand.N(200*time.Millisecond))
			continue
		}
		holdPolls.Add(1)
		if g, err := strconv.ParseInt(strings.Trim(etag, `"`), 10, 64); err == nil && g > gen {
			gen = g
		}
	}
}

// holdConn is the connection a host's last answer left open (nil: none).
type holdConn struct {
	c net.Conn
	r *bufio.Reader
}

func (hc *holdConn) close() {
	if hc.c != nil {
		hc.c.Close()
		hc.c, hc.r = nil, nil
	}
}

// holdOnce makes one poll and returns the answer's ETag; a status other
// than 200 or 304 is an error.
func holdOnce(addr string, h host, gen int64, wait string, source int, conf *tls.Config, first *atomic.Int64, keep bool, hc *holdConn) (string, error) {
	resp, _, err := exchange(hc, addr, source, conf, pollRequest(addr, h.token, gen, wait), keep, func() {
		if ns := time.Now().UnixNano() - holdMark.Load(); ns > 0 {
			first.CompareAndSwap(0, ns)
		}
	})
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 && resp.StatusCode != 304 {
		hc.close()
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.Header.Get("ETag"), nil
}

// exchange sends req on the connection hc holds, or on a new one (dialled,
// with its TLS handshake, under the dialing limit), and reads the answer
// whole; sent, when not nil, is called once the request is written.
// Without keep the request asks the controller to close the connection;
// hc is closed after the answer then, after an error, and after an answer
// that says Connection: close — else it is left for the host's next poll.
func exchange(hc *holdConn, addr string, source int, conf *tls.Config, req string, keep bool, sent func()) (resp *http.Response, body []byte, err error) {
	defer func() {
		if err != nil || !keep || resp.Close {
			hc.close()
		}
	}()
	if !keep {
		req = strings.Replace(req, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
	}
	if hc.c == nil {
		dialing <- struct{}{}
		err = dialHold(addr, source, conf, hc)
		if err == nil {
			_, err = io.WriteString(hc.c, req)
		}
		<-dialing
	} else {
		_, err = io.WriteString(hc.c, req)
	}
	if err != nil {
		return nil, nil, err
	}
	if sent != nil {
		sent()
	}
	if resp, err = http.ReadResponse(hc.r, nil); err != nil {
		return nil, nil, err
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, err
}

// ipBindAddressNoPort is Linux's IP_BIND_ADDRESS_NO_PORT.
const ipBindAddressNoPort = 24

// dialHold opens a host's connection (with its TLS handshake) into hc.
func dialHold(addr string, source int, conf *tls.Config, hc *holdConn) error {
	// The source address is bound with IP_BIND_ADDRESS_NO_PORT: the port
	// is then chosen at connect, unique per destination, as for a dial
	// without one. Bound with its port first, a run right after another
	// ran out of ports (bind: address already in use) while the last
	// run's connections sat in TIME_WAIT.
	d := net.Dialer{Timeout: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+source))},
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
			}); err != nil {
				return err
			}
			return serr
		}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	if conf != nil {
		tc := tls.Client(conn, conf)
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return err
		}
		holdHS.Add(1)
		if tc.ConnectionState().DidResume {
			holdResumed.Add(1)
		}
		conn = tc
	}
	hc.c, hc.r = conn, bufio.NewReader(conn)
	return nil
}
