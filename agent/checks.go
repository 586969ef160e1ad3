package agent

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"mesh/models"
)

// checkResult is one run of a check. final says that running it again
// within the settle time cannot change the answer: its command could not
// be run at all (missing, not executable), so it fails at once.
type checkResult struct {
	ok     bool
	final  bool
	detail string
}

// runCheck runs a service's check once. A check is only as good as what it
// ran: "healthy" is said of nothing that was not checked, and a check that
// could not run is a failing check.
func runCheck(ctx context.Context, root *machineRoot, ca *x509.Certificate, r models.Resource) checkResult {
	c := r.Check
	if c == nil {
		return checkResult{final: true, detail: "no check"}
	}
	timeout := 5 * time.Second
	if d, err := time.ParseDuration(c.Timeout); err == nil && d > 0 {
		timeout = d
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case c.TCP != "":
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", c.TCP)
		if err != nil {
			return checkResult{detail: "tcp " + c.TCP + ": " + err.Error()}
		}
		conn.Close()
		return checkResult{ok: true, detail: "tcp " + c.TCP}
	case c.HTTP != "":
		req, err := http.NewRequestWithContext(ctx, "GET", c.HTTP, nil)
		if err != nil {
			return checkResult{final: true, detail: "http " + c.HTTP + ": " + err.Error()}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return checkResult{detail: "http " + c.HTTP + ": " + err.Error()}
		}
		resp.Body.Close()
		want := c.Status
		if want == 0 {
			want = 200
		}
		if resp.StatusCode != want {
			return checkResult{detail: fmt.Sprintf("http %s: status %d, want %d", c.HTTP, resp.StatusCode, want)}
		}
		return checkResult{ok: true, detail: fmt.Sprintf("http %s: %d", c.HTTP, resp.StatusCode)}
	case len(c.Exec) > 0:
		return runExecCheck(ctx, root, r)
	case c.TLS != "":
		return runTLSCheck(ctx, ca, c)
	}
	return checkResult{final: true, detail: "no check"}
}

// runExecCheck runs an exec check by the rule that runs the service itself
// (machineRoot.command): same mapping under --root, directory and env.
func runExecCheck(ctx context.Context, root *machineRoot, r models.Resource) checkResult {
	what := "exec " + strings.Join(r.Check.Exec, " ")
	hc, err := root.command(r.Check.Exec, r.Env)
	if err != nil {
		return checkResult{final: true, detail: what + ": cannot run: " + err.Error()}
	}
	cmd := hc.cmd(ctx)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A check's children that keep its output open must not hold it past
	// its timeout.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return checkResult{final: true, detail: what + ": cannot run: " + err.Error()}
	}
	if err := cmd.Wait(); err != nil {
		detail := what + ": " + err.Error()
		if said := strings.TrimSpace(out.String()); said != "" {
			detail += ": " + said // a check that says nothing leaves no ": "
		}
		return checkResult{detail: detail}
	}
	return checkResult{ok: true, detail: what}
}

// checkAll runs the checks of every service that declares one, giving each
// up to settle to pass (a service just started needs a moment); a check
// whose command cannot run fails at once.
func checkAll(ctx context.Context, root *machineRoot, ca *x509.Certificate, rs []models.Resource, settle time.Duration) []models.CheckResult {
	return checkServices(ctx, root, ca, rs, settle, nil)
}

// serviceHealth is a services implementation that knows whether a service
// had to be restarted (the host's supervisor).
type serviceHealth interface {
	health(id string) svcHealth
}

// checkServices is checkAll where sup (nil: none) tells of the services it
// restarted: such a service is a failing check of itself, declared check
// or not, saying how it exited and how often it was restarted since when,
// until it has stayed up for the supervisor's settle (then a service
// without a check says nothing again: healthy is said only of what a check
// ran). Its state is read after its check ran, so what is reported is the
// supervisor's word at the report; a service just started is not called
// healthy before it has run upMoment, waited for within settle like a
// check that does not pass yet.
func checkServices(ctx context.Context, root *machineRoot, ca *x509.Certificate, rs []models.Resource, settle time.Duration, sup serviceHealth) []models.CheckResult {
	var out []models.CheckResult
	for _, r := range rs {
		if r.Kind != "service" || r.Check == nil && sup == nil {
			continue
		}
		deadline := time.Now().Add(settle)
		for {
			res := checkResult{ok: true}
			if r.Check != nil {
				res = runCheck(ctx, root, ca, r)
			}
			young := false
			if sup != nil {
				h := sup.health(r.ID)
				switch {
				case h.failing:
					// It cannot pass before it stayed up for settle.
					res = checkResult{final: true, detail: h.detail}
				case h.known && h.up < upMoment:
					young = true
				}
			}
			past := time.Now().After(deadline)
			if res.ok && !young || res.final || past || ctx.Err() != nil {
				if r.Check != nil || !res.ok {
					out = append(out, models.CheckResult{Resource: r.ID, OK: res.ok, At: time.Now().UTC(), Detail: res.detail})
				}
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return out
}
