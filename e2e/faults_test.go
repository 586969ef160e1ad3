package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"mesh/agent"
	"mesh/store"
	"mesh/store/storetest"
)

// instance is one controller process of the fault-injection test, managed
// without t (its goroutine must not call t.Fatal).
type instance struct {
	mu      sync.Mutex
	port    string
	cfg     store.Config
	cmd     *exec.Cmd
	stopped bool // SIGSTOPped
	log     *syncBuffer
	done    chan struct{} // closed when the process has exited
	// client reaches it: over TLS (the TLS variant), one that trusts
	// the mesh CA alone.
	client *http.Client
}

// watch reaps the process and says when it has exited.
func (in *instance) watch(c *exec.Cmd) {
	done := make(chan struct{})
	in.done = done
	go func() { _ = c.Wait(); close(done) }()
}

func (in *instance) url() string {
	if in.client != nil {
		return "https://127.0.0.1:" + in.port
	}
	return "http://127.0.0.1:" + in.port
}

func (in *instance) httpClient() *http.Client {
	if in.client != nil {
		return in.client
	}
	return http.DefaultClient
}

func (in *instance) start() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	args := []string{"serve", "--listen", "127.0.0.1:" + in.port,
		"--data", in.cfg.DataDir, "--database", in.cfg.DatabaseURL, "--resync", "3s", "--log-level", "warn"}
	if in.client != nil {
		args = append(args, "--tls")
	}
	in.cmd = exec.Command(filepath.Join(bin, "mesh-controller"), args...)
	if in.log == nil {
		in.log = &syncBuffer{}
	}
	in.cmd.Stdout, in.cmd.Stderr = in.log, in.log
	if err := in.cmd.Start(); err != nil {
		return err
	}
	in.watch(in.cmd)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := in.httpClient().Get(in.url() + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("controller on %s not ready", in.port)
}

func (in *instance) signal(sig syscall.Signal) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil && in.cmd.Process != nil {
		_ = in.cmd.Process.Signal(sig)
	}
	switch sig {
	case syscall.SIGSTOP:
		in.stopped = true
	case syscall.SIGCONT:
		in.stopped = false
	}
}

// gone waits for the process to exit after a signal that ends it (a
// drain is bounded; past 20 s it is killed).
func (in *instance) gone() {
	in.mu.Lock()
	c, done := in.cmd, in.done
	in.mu.Unlock()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

func (in *instance) running() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	select {
	case <-in.done:
		return false
	default:
		return true
	}
}

// api is a driver's HTTP call to any live instance, in turn.
type api struct {
	ins   []*instance
	token string
	c     *http.Client
}

func (a *api) do(method, path string, ifMatch int64, body any) (int, []byte, string) {
	var rb []byte
	if body != nil {
		rb, _ = json.Marshal(body)
	}
	for _, i := range rand.Perm(len(a.ins)) {
		req, _ := http.NewRequest(method, a.ins[i].url()+path, bytes.NewReader(rb))
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("Content-Type", "application/json")
		if ifMatch > 0 {
			req.Header.Set("If-Match", fmt.Sprintf(`"%d"`, ifMatch))
		}
		resp, err := a.c.Do(req)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			continue
		}
		return resp.StatusCode, b, resp.Header.Get("ETag")
	}
	return 0, nil, ""
}

// upload posts a build of a module (which makes a plan) to any live instance.
func (a *api) upload(module, manifest string) int {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("manifest", manifest)
	mw.Close()
	for _, i := range rand.Perm(len(a.ins)) {
		req, _ := http.NewRequest("POST", a.ins[i].url()+"/api/v1/modules/"+module+"/builds", bytes.NewReader(buf.Bytes()))
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := a.c.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode < 500 {
			return resp.StatusCode
		}
	}
	return 0
}

func (a *api) generation(m string) int64 {
	st, b, _ := a.do("GET", "/api/v1/machines/"+m, 0, nil)
	if st != 200 {
		return 0
	}
	var v struct{ Generation int64 }
	_ = json.Unmarshal(b, &v)
	return v.Generation
}

// TestFaults_NoStaleSendThroughHandovers: three controller instances on
// one PostgreSQL, five hosts, a driver making random assignment changes,
// variable changes, pushes and new builds (each rolled out by a plan) while instances are SIGTERM'd, SIGKILL'd,
// paused (SIGSTOP, SIGCONT after longer than a poll's wait: the stale
// leader) and restarted at random (seeded; the seed is printed). Then,
// from the hosts' journals and the store: no host refused an older
// generation or an equal one with another digest; every declaration a host
// applied has its send row with the same digest; every send's digest is
// the stored declaration's; no plan step ran twice and a finished plan
// skipped none; every machine converges once the faults stop.
func TestFaults_NoStaleSendThroughHandovers(t *testing.T) {
	seeds := []uint64{1, 2}
	if s := os.Getenv("MESH_FAULT_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			n, _ := strconv.ParseUint(f, 10, 64)
			seeds = append(seeds, n)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { faultRun(t, seed, false) })
	}
}

// TestFaults_NoStaleSendThroughHandovers_TLS: the same over TLS, hosts
// known by their machine certificates; the pinned CA is every instance's.
func TestFaults_NoStaleSendThroughHandovers_TLS(t *testing.T) {
	faultRun(t, 3, true)
}

func faultRun(t *testing.T, seed uint64, tlsOn bool) {
	t.Logf("seed %d (MESH_FAULT_SEEDS=%d reproduces it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed*7919+1))
	cfg := storetest.Config(t, store.Postgres)
	var first *controllerProc
	var client *http.Client
	if tlsOn {
		first = &controllerProc{t: t, port: freePort(t), cfg: cfg, extra: []string{"--tls", "--resync", "3s"}, tls: true}
		first.URL = "https://127.0.0.1:" + first.port
		first.start()
		t.Cleanup(first.stop)
		client = &http.Client{Transport: first.transport}
	} else {
		first = startControllerOn(t, cfg)
	}
	ins := []*instance{{port: first.port, cfg: cfg, client: client}}
	// The first instance runs under the harness; take it over.
	ins[0].cmd, ins[0].log = first.cmd, first.log
	ins[0].watch(first.cmd)
	first.cmd = nil
	for range 2 {
		in := &instance{port: freePort(t), cfg: store.Config{DataDir: t.TempDir(), DatabaseURL: cfg.DatabaseURL}, client: client}
		if err := in.start(); err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	t.Cleanup(func() {
		for _, in := range ins {
			in.signal(syscall.SIGCONT)
			in.signal(syscall.SIGKILL)
		}
		if t.Failed() {
			for i, in := range ins {
				t.Logf("controller %d log:\n%s", i, in.log.String())
			}
		}
	})
	first.module("conf")
	first.upload("conf", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/conf", "content": "x=${var.x}\n"}]}`, nil)
	first.module("extra")
	first.upload("extra", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/extra", "content": "extra on ${machine.name}\n"}]}`, nil)
	urls := []string{}
	for _, in := range ins {
		urls = append(urls, in.url())
	}
	var hosts []*hostProc
	for i := range 5 {
		name := fmt.Sprintf("h%d", i)
		h := enroll(t, first, name, strings.Join(urls, ","))
		h.start("--wait", "3s")
		hosts = append(hosts, h)
		first.setVars(name, map[string]string{"x": "0"})
		first.assign(name, "conf")
	}
	a := &api{ins: ins, token: first.Admin, c: &http.Client{Timeout: 3 * time.Second}}
	if tlsOn {
		a.c.Transport = first.transport
	}

	// Faults, bounded in count and time.
	ctx, stop := context.WithTimeout(context.Background(), 25*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var faultLog []string
	var flMu sync.Mutex
	note := func(s string) { flMu.Lock(); faultLog = append(faultLog, s); flMu.Unlock() }
	frng := rand.New(rand.NewPCG(seed+100, seed))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; n < 8; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(1500+frng.IntN(2000)) * time.Millisecond):
			}
			i := frng.IntN(len(ins))
			in := ins[i]
			switch frng.IntN(4) {
			case 0:
				note(fmt.Sprintf("SIGTERM %d", i))
				in.signal(syscall.SIGTERM)
				in.gone()
				time.Sleep(time.Duration(500+frng.IntN(1000)) * time.Millisecond)
				_ = in.start()
			case 1:
				note(fmt.Sprintf("SIGKILL %d", i))
				in.signal(syscall.SIGKILL)
				in.gone()
				_ = in.start()
			case 2:
				note(fmt.Sprintf("SIGSTOP %d for 5s", i))
				in.signal(syscall.SIGSTOP)
				time.Sleep(5 * time.Second) // longer than a poll's wait: the stale leader
				in.signal(syscall.SIGCONT)
			case 3:
				note(fmt.Sprintf("restart %d", i))
				in.signal(syscall.SIGTERM)
				in.gone()
				_ = in.start()
			}
		}
	}()

	// The driver: random changes through whichever instance answers.
	ops := 0
	for ctx.Err() == nil {
		m := fmt.Sprintf("h%d", rng.IntN(5))
		gen := a.generation(m)
		if gen == 0 {
			continue
		}
		switch rng.IntN(4) {
		case 3:
			// A new build of conf: a plan rolls it out tier by tier.
			a.upload("conf", fmt.Sprintf(`{"resources": [{"name": "f", "kind": "file", "path": "/etc/conf", "content": "x=${var.x}\nrelease %d\n"}]}`, ops))
		case 0:
			a.do("PUT", "/api/v1/machines/"+m+"/variables", gen, map[string]any{"variables": map[string]string{"x": strconv.Itoa(rng.IntN(1000))}})
		case 1:
			a.do("POST", "/api/v1/machines/"+m+"/push", gen, nil)
		case 2:
			mods := []map[string]string{{"module": "conf"}}
			if rng.IntN(2) == 0 {
				mods = append(mods, map[string]string{"module": "extra"})
			}
			a.do("PUT", "/api/v1/machines/"+m+"/assignments", gen, map[string]any{"assignments": mods})
		}
		ops++
		time.Sleep(time.Duration(50+rng.IntN(150)) * time.Millisecond)
	}
	wg.Wait()
	t.Logf("%d changes; faults: %s", ops, strings.Join(faultLog, ", "))
	for _, in := range ins {
		in.signal(syscall.SIGCONT)
		if !in.running() {
			if err := in.start(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Convergence within a bound once the faults stop.
	var last []string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("machines at the end: %s", strings.Join(last, "; "))
			// Each host's last words, one line each (CI shows test lines).
			for _, h := range hosts {
				lines := strings.Split(strings.TrimSpace(h.log.String()), "\n")
				for _, l := range lines[max(0, len(lines)-6):] {
					t.Logf("%s: %s", h.Name, l)
				}
			}
		}
	})
	waitFor(t, 60*time.Second, "every machine applies its latest generation", func() bool {
		last = last[:0]
		ok := true
		for i := range 5 {
			st, b, _ := a.do("GET", fmt.Sprintf("/api/v1/machines/h%d", i), 0, nil)
			var v struct {
				Generation        int64  `json:"generation"`
				AppliedGeneration int64  `json:"applied_generation"`
				State             string `json:"state"`
				LastReason        string `json:"last_reason"`
			}
			_ = json.Unmarshal(b, &v)
			last = append(last, fmt.Sprintf("h%d %d: gen %d applied %d %s %s", i, st, v.Generation, v.AppliedGeneration, v.State, v.LastReason))
			if st != 200 || v.AppliedGeneration != v.Generation {
				ok = false
			}
		}
		return ok
	})

	// Plans still running step on after the faults stop, so the record
	// is read in an order that cannot race them: what hosts journaled
	// first, then the sends (each committed before its bytes left, so
	// every journaled send is in a later read); plans before their steps.
	journals := make([][]agent.Entry, len(hosts))
	for i, h := range hosts {
		journals[i] = h.journal()
	}
	st, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	type row struct {
		ID         string
		Machine    string
		Generation int64
		Digest     string
	}
	var sends []row
	st.DB().Raw(`SELECT s.id, m.name AS machine, s.generation, s.digest FROM sends s JOIN machines m ON m.id = s.machine_id`).Scan(&sends)
	byID := map[string]row{}
	for _, s := range sends {
		byID[s.ID] = s
	}
	var mismatched int64
	st.DB().Raw(`SELECT count(*) FROM sends s JOIN declarations d ON d.machine_id = s.machine_id AND d.generation = s.generation WHERE d.digest <> s.digest`).Scan(&mismatched)
	var orphan int64
	st.DB().Raw(`SELECT count(*) FROM sends s LEFT JOIN declarations d ON d.machine_id = s.machine_id AND d.generation = s.generation WHERE d.id IS NULL`).Scan(&orphan)
	if mismatched != 0 || orphan != 0 {
		t.Fatalf("%d send(s) whose digest is not the stored declaration's, %d without a declaration", mismatched, orphan)
	}
	// Plans: none skipped a step or ran one twice. Each step made one
	// generation of its own; a plan that ended done applied every step.
	var plans []struct {
		ID    int64
		State string
	}
	st.DB().Raw(`SELECT id, state FROM plans`).Scan(&plans)
	var steps []struct {
		PlanID     int64
		MachineID  int64
		State      string
		Generation int64
	}
	st.DB().Raw(`SELECT plan_id, machine_id, state, generation FROM plan_steps`).Scan(&steps)
	planState := map[int64]string{}
	for _, p := range plans {
		planState[p.ID] = p.State
	}
	seenGen := map[[2]int64]int64{}
	for _, sp := range steps {
		if sp.State == "pending" {
			if planState[sp.PlanID] == "done" {
				t.Errorf("plan %d ended done with a step never run on machine %d", sp.PlanID, sp.MachineID)
			}
			continue
		}
		key := [2]int64{sp.MachineID, sp.Generation}
		if other, dup := seenGen[key]; dup {
			t.Errorf("generation %d of machine %d was made by two steps (plans %d and %d)", sp.Generation, sp.MachineID, other, sp.PlanID)
		}
		seenGen[key] = sp.PlanID
		if planState[sp.PlanID] == "done" && sp.State != "applied" {
			t.Errorf("plan %d ended done with machine %d's step %s", sp.PlanID, sp.MachineID, sp.State)
		}
	}
	t.Logf("%d plans, %d steps", len(plans), len(steps))
	applied := 0
	for i, h := range hosts {
		for _, e := range journals[i] {
			if e.Outcome == "refused" && (strings.Contains(e.Reason, "older") || strings.Contains(e.Reason, "was applied with digest")) {
				t.Errorf("%s refused a stale declaration (generation %d): %s", h.Name, e.Generation, e.Reason)
			}
			if e.Outcome != "applied" || e.Send == "" {
				continue
			}
			applied++
			s, ok := byID[e.Send]
			if !ok || s.Machine != h.Name || s.Generation != e.Generation || s.Digest != e.Digest {
				t.Errorf("%s applied generation %d from send %s, which the store records as %+v (found %v)", h.Name, e.Generation, e.Send, s, ok)
			}
		}
	}
	t.Logf("%d sends on record, %d applies journaled, every one matched", len(sends), applied)
}

// startControllerOn runs a controller binary on a given store.
func startControllerOn(t *testing.T, cfg store.Config) *controllerProc {
	t.Helper()
	c := &controllerProc{t: t, port: freePort(t), cfg: cfg}
	c.URL = "http://127.0.0.1:" + c.port
	t.Cleanup(c.stop) // first: a start that fails still stops the process and shows its log
	c.start()
	return c
}
