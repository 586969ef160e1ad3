package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"mesh/models"
)

// runCheck runs a service's check once. A check is only as good as what it
// ran: "healthy" is said of nothing that was not checked.
func runCheck(ctx context.Context, root *machineRoot, c *models.Check) (bool, string) {
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
			return false, "tcp " + c.TCP + ": " + err.Error()
		}
		conn.Close()
		return true, "tcp " + c.TCP
	case c.HTTP != "":
		req, err := http.NewRequestWithContext(ctx, "GET", c.HTTP, nil)
		if err != nil {
			return false, "http " + c.HTTP + ": " + err.Error()
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, "http " + c.HTTP + ": " + err.Error()
		}
		resp.Body.Close()
		want := c.Status
		if want == 0 {
			want = 200
		}
		if resp.StatusCode != want {
			return false, fmt.Sprintf("http %s: status %d, want %d", c.HTTP, resp.StatusCode, want)
		}
		return true, fmt.Sprintf("http %s: %d", c.HTTP, resp.StatusCode)
	case len(c.Exec) > 0:
		name := c.Exec[0]
		if strings.HasPrefix(name, "/") {
			name = root.host(name)
		}
		cmd := exec.CommandContext(ctx, name, c.Exec[1:]...)
		cmd.Env = serviceEnv(root.dir, nil)
		if out, err := cmd.CombinedOutput(); err != nil {
			return false, "exec " + strings.Join(c.Exec, " ") + ": " + err.Error() + ": " + strings.TrimSpace(string(out))
		}
		return true, "exec " + strings.Join(c.Exec, " ")
	}
	return false, "no check"
}

// checkAll runs the checks of every service that declares one, giving each
// up to settle to pass (a service just started needs a moment).
func checkAll(ctx context.Context, root *machineRoot, rs []models.Resource, settle time.Duration) []models.CheckResult {
	var out []models.CheckResult
	for _, r := range rs {
		if r.Kind != "service" || r.Check == nil {
			continue
		}
		deadline := time.Now().Add(settle)
		for {
			ok, detail := runCheck(ctx, root, r.Check)
			if ok || time.Now().After(deadline) || ctx.Err() != nil {
				out = append(out, models.CheckResult{Resource: r.ID, OK: ok, At: time.Now().UTC(), Detail: detail})
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
