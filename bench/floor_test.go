package bench

import (
	"bufio"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/conns"
	"mesh/models"
	"mesh/store"
)

// BenchmarkFanoutFloor: the fan-out's transport alone. 10,000 hosts'
// polls, held by BenchmarkFanout's load process over real TCP, are
// answered by a server that does nothing else: each answer a real batch
// envelope with mesh's headers, made and sealed before the change, no
// store, no composing, no signing, written to its host's own connection
// by two goroutines as soon as the change's request arrives. What it
// measures is the floor of any fan-out that answers every host on a
// connection of its own on this machine (etcd's watchers share 16), the
// figure BenchmarkFanout's p99 is to be read against beside etcd's.
func BenchmarkFanoutFloor(b *testing.B) {
	bin := b.TempDir()
	build(b, bin, "loadgen", "./bench/loadgen")
	b.Run(fmt.Sprintf("floor-%d", fanoutHosts), func(b *testing.B) {
		for range b.N {
			floor(b, bin, fanoutHosts)
		}
	})
}

// floorServer holds the polls and answers them all at the change.
type floorServer struct {
	ln      net.Listener
	answers map[string][2][]byte // by token: the answers to a poll from generation 1 and from 2
	parked  atomic.Int64
	mu      sync.Mutex
	polls   []floorPoll
}

type floorPoll struct {
	c      net.Conn
	answer []byte
}

func floor(b *testing.B, bin string, n int) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	signer := &store.KeySigner{ID: "floor", Priv: priv}
	srv := &floorServer{answers: make(map[string][2][]byte, n)}
	var tokens strings.Builder
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("host-%05d", i)
		fmt.Fprintf(&tokens, "%s tok-%05d\n", names[i], i)
	}
	size := 0
	for g := range 2 {
		gen := int64(g + 2)
		// Sealed in batches of 500, as a fan-out's chunks are.
		for lo := 0; lo < n; lo += 500 {
			hi := min(n, lo+500)
			payloads := make([][]byte, 0, hi-lo)
			for _, name := range names[lo:hi] {
				content := "machine=" + name + "\n"
				p := models.DeclarationPayload{Schema: 1, Machine: name, Generation: gen, ComposedAt: time.Now().UTC(), ComposedBy: "floor",
					Resources: []models.Resource{{ID: "mod/config", Module: "mod", Build: gen, Kind: "file", Path: "/etc/mod.conf", Content: &content, Mode: "0644"}}}
				raw, err := p.Marshal()
				if err != nil {
					b.Fatal(err)
				}
				payloads = append(payloads, raw)
			}
			envs, err := models.SealBatch(payloads, signer)
			if err != nil {
				b.Fatal(err)
			}
			for j, env := range envs {
				tok := fmt.Sprintf("tok-%05d", lo+j)
				a := srv.answers[tok]
				a[g] = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nEtag: \"" + strconv.FormatInt(gen, 10) +
					"\"\r\nX-Mesh-Send: " + uuid.NewString() + "\r\nCache-Control: no-store\r\nContent-Length: " + strconv.Itoa(len(env)) + "\r\n\r\n" + string(env))
				srv.answers[tok] = a
				size += len(a[g])
			}
		}
	}
	tokensFile := filepath.Join(b.TempDir(), "tokens")
	if err := os.WriteFile(tokensFile, []byte(tokens.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	// One descriptor a held poll, in this process too.
	if _, _, err := conns.RaiseFileLimit(slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	if srv.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	defer srv.ln.Close()
	go srv.serve()

	sources := max(1, (n+19999)/20000)
	load := exec.Command(filepath.Join(bin, "loadgen"), "-url", "http://"+srv.ln.Addr().String(), "-tokens", tokensFile,
		"-pubkey", base64.StdEncoding.EncodeToString(pub), "-admin", "floor", "-module", "mod", "-sources", strconv.Itoa(sources))
	stdin, _ := load.StdinPipe()
	stdout, _ := load.StdoutPipe()
	load.Stderr = os.Stderr
	if err := load.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = load.Wait() }()
	say := loadgenDialogue(b, stdin, stdout)
	for _, round := range []struct {
		label      string
		gen, build int
	}{{"first", 1, 2}, {"second", 2, 1}} {
		say(fmt.Sprintf("open %d", round.gen), "opened")
		waitUntil(b, 120*time.Second, func() bool { return srv.parked.Load() == int64(n) })
		cpu0 := cpuTime(b, os.Getpid())
		var r struct {
			Polls, OK, Verified int
			FirstMs             float64 `json:"first_ms"`
			P50Ms               float64 `json:"p50_ms"`
			P99Ms               float64 `json:"p99_ms"`
			CPUMs               float64 `json:"cpu_ms"`
			FirstError          string  `json:"first_error"`
		}
		say(fmt.Sprintf("fire %d", round.build), "result ", &r)
		cpu := cpuTime(b, os.Getpid()) - cpu0
		b.Logf("floor %s fan-out: %d polls, %d ok, %d verified, answers of %d bytes; first poll %.0f ms, p50 %.0f ms, p99 %.0f ms; CPU: server %v, load process %.0f ms %s",
			round.label, r.Polls, r.OK, r.Verified, size/(2*n), r.FirstMs, r.P50Ms, r.P99Ms, cpu.Round(time.Millisecond), r.CPUMs, r.FirstError)
		if r.Verified != n {
			b.Fatalf("%d of %d envelopes verified", r.Verified, n)
		}
		b.ReportMetric(r.P50Ms, round.label+"-p50-ms")
		b.ReportMetric(r.P99Ms, round.label+"-p99-ms")
		b.ReportMetric(float64(cpu.Microseconds())/float64(n), round.label+"-cpu-µs/machine")
	}
}

// serve reads each connection's requests: a poll is parked with its
// answer, the change's request is answered and answers every parked poll.
func (s *floorServer) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(r)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				if req.Method == http.MethodPost {
					if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")); err != nil {
						return
					}
					s.fire()
					continue
				}
				known := 0
				if req.Header.Get("If-None-Match") == `"2"` {
					known = 1
				}
				answer := s.answers[strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")][known]
				s.mu.Lock()
				s.polls = append(s.polls, floorPoll{c, answer})
				s.mu.Unlock()
				s.parked.Add(1)
			}
		}()
	}
}

// fire answers every parked poll, on two goroutines (the machine's cores).
func (s *floorServer) fire() {
	s.mu.Lock()
	polls := s.polls
	s.polls = nil
	s.mu.Unlock()
	s.parked.Store(0)
	half := len(polls) / 2
	for _, part := range [][]floorPoll{polls[:half], polls[half:]} {
		go func() {
			for _, p := range part {
				_, _ = p.c.Write(p.answer)
			}
		}()
	}
}
