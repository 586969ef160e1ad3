package api_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/testwait"
)

// scrape reads /metrics as name{labels} → value (labels as written, in
// the exposition's order: `mesh_machines{state="current"}`).
func scrape(t *testing.T, e *ctltest.Env) map[string]float64 {
	t.Helper()
	resp, err := http.Get(e.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	out := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^(mesh_[a-z_]+(?:\{[^}]*\})?) (\S+)$`).FindAllStringSubmatch(string(b), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("%s: %v", m[0], err)
		}
		out[m[1]] = v
	}
	return out
}

// sendPoll polls once with nothing known past known and expects a
// declaration; it returns the send id and the generation.
func sendPoll(t *testing.T, e *ctltest.Env, token string, known int64) (string, int64) {
	t.Helper()
	p := doPoll(e, token, known, "5s")
	if p.status != 200 {
		t.Fatalf("poll after %d: %d %s", known, p.status, p.body)
	}
	gen, _ := strconv.ParseInt(strings.Trim(p.etag, `"`), 10, 64)
	return p.send, gen
}

// TestMetrics_FleetAsTheAPISaysIt: /metrics of a real controller counts
// machines by the state the API gives them (one current, two behind — one
// of them unable to compose — and one offline), by health, failing checks
// and compose errors; plans by state with the tier a plan completed in
// its histogram; and sends by trigger, which move when a send is made.
func TestMetrics_FleetAsTheAPISaysIt(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.Ctl.Server.MetricsMaxAge = time.Millisecond // every scrape reads the store
		now := time.Now().UTC()
		checks := func(ok bool) []map[string]any {
			return []map[string]any{{"resource": "app.conf", "ok": ok, "at": now, "detail": "probe"}}
		}
		const app = `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/app.conf", "content": "v\n"}]}`
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "app"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "app", app, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}

		// m-current runs app, then a plan takes it to build 2.
		cur := e.Enroll("m-current")
		send, gen := sendPoll(t, e, cur.Token, 0)
		report(e, cur.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m-current/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "app"}}}}, 200, nil)
		send, gen = sendPoll(t, e, cur.Token, gen)
		report(e, cur.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied",
			"running": map[string]any{"app": map[string]any{"build": 1}}, "checks": checks(true)})
		if resp, b := e.Upload(e.Admin, "app", app, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload 2: %d %s", resp.StatusCode, b)
		}
		send, gen = sendPoll(t, e, cur.Token, gen)
		report(e, cur.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied",
			"running": map[string]any{"app": map[string]any{"build": 2}}, "checks": checks(true)})
		var plans struct {
			Items []struct{ State string } `json:"items"`
		}
		waitFor(t, 10*time.Second, func() bool {
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: e.Admin}, 200, &plans)
			return len(plans.Items) == 1 && plans.Items[0].State == models.PlanDone
		})
		// The plan's end made build 2 current: one generation more.
		send, gen = sendPoll(t, e, cur.Token, gen)
		report(e, cur.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied",
			"running": map[string]any{"app": map[string]any{"build": 2}}, "checks": checks(true)})

		// m-behind applied generation 1 with a failing check, then its
		// variables changed and it has not polled since.
		behind := e.Enroll("m-behind")
		send, gen = sendPoll(t, e, behind.Token, 0)
		report(e, behind.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied", "checks": checks(false)})
		firstVariables(e, "m-behind")

		// m-broken is assigned a module needing a variable it lacks.
		broken := e.Enroll("m-broken")
		send, gen = sendPoll(t, e, broken.Token, 0)
		report(e, broken.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "needs-port"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "needs-port", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/p.conf", "content": "port=${var.port}\n"}]}`, nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %s", b)
		}
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m-broken/assignments", Token: e.Admin,
			Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "needs-port"}}}}, 200, nil)

		// m-offline enrolled an hour ago and went quiet, its last word
		// "passing": no fact of now, so its health is counted unknown.
		e.Enroll("m-offline")
		if err := e.Ctl.Store.DB().Exec("UPDATE machines SET created_at = ?, last_seen = ?, health = ? WHERE name = ?",
			now.Add(-time.Hour), now.Add(-time.Hour), models.HealthPassing, "m-offline").Error; err != nil {
			t.Fatal(err)
		}

		// m-revoked was revoked and its host went quiet an hour ago:
		// revoked, which comes before offline.
		e.Enroll("m-revoked")
		if err := e.Ctl.Store.DB().Exec("UPDATE machines SET created_at = ?, last_seen = ?, revoked_at = ? WHERE name = ?",
			now.Add(-time.Hour), now.Add(-time.Hour), now.Add(-time.Hour), "m-revoked").Error; err != nil {
			t.Fatal(err)
		}
		// m-held finished its generation, but what it applied was held
		// back: behind. Its enrolment's generation is composed first: a
		// compose that read the machine after the update below would put
		// back what it composed (nothing held back) in its place.
		e.Enroll("m-held")
		testwait.For(t, 10*time.Second, "m-held's enrolment composed", e.Ctl.Hub.Settled)
		if err := e.Ctl.Store.DB().Exec("UPDATE machines SET finished_generation = generation, last_outcome = ?, held_back = ? WHERE name = ?",
			models.OutcomeApplied, "held back: needs host schema 2", "m-held").Error; err != nil {
			t.Fatal(err)
		}

		// What the API says, the metrics count.
		var list struct {
			Items []struct {
				Name         string `json:"name"`
				State        string `json:"state"`
				ComposeError string `json:"compose_error"`
			} `json:"items"`
		}
		want := map[string]float64{
			`mesh_machines{state="current"}`: 1, `mesh_machines{state="behind"}`: 3, `mesh_machines{state="offline"}`: 1,
			`mesh_machines{state="revoked"}`:         1,
			`mesh_machines_health{health="passing"}`: 1, `mesh_machines_health{health="failing"}`: 1, `mesh_machines_health{health="none"}`: 2,
			`mesh_machines_health{health="unknown"}`: 2,
			`mesh_checks_failing`:                    1, `mesh_compose_errors`: 1, `mesh_fleet_up`: 1, `mesh_hub_machines`: 6,
			`mesh_plans{state="done"}`: 1, `mesh_plans{state="running"}`: 0, `mesh_rollouts{state="running"}`: 0,
			`mesh_plan_tier_duration_seconds_count{module="app",outcome="completed"}`: 1,
			`mesh_sends_total{trigger="enrol"}`:                                       3, `mesh_sends_total{trigger="assignment"}`: 1, `mesh_sends_total{trigger="plan"}`: 1,
			`mesh_sends_total{trigger="current"}`:   1,
			`mesh_sends_total{trigger="variables"}`: 0,
		}
		for _, s := range models.MachineStates() {
			if _, ok := want[`mesh_machines{state="`+s+`"}`]; !ok {
				want[`mesh_machines{state="`+s+`"}`] = 0 // every word, zero included
			}
		}
		var got map[string]float64
		mismatch := func() string {
			got = scrape(t, e)
			var diff []string
			for k, v := range want {
				if g, ok := got[k]; !ok || g != v {
					diff = append(diff, fmt.Sprintf("%s = %v (present %v), want %v", k, g, ok, v))
				}
			}
			return strings.Join(diff, "\n")
		}
		// The compose error is recorded when the hub composes ahead.
		testwait.Until(10*time.Second, func() bool { return mismatch() == "" })
		if d := mismatch(); d != "" {
			e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: e.Admin}, 200, &list)
			t.Fatalf("metrics:\n%s\nthe API says: %+v", d, list.Items)
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: e.Admin}, 200, &list)
		byState := map[string]float64{}
		for _, m := range list.Items {
			byState[m.State]++
		}
		for s, n := range byState {
			if got[`mesh_machines{state="`+s+`"}`] != n {
				t.Fatalf("the API says %v machines %s, the metrics %v", n, s, got[`mesh_machines{state="`+s+`"}`])
			}
		}

		// A send moves the counter of its trigger.
		sendPoll(t, e, behind.Token, 1)
		if n := scrape(t, e)[`mesh_sends_total{trigger="variables"}`]; n != 1 {
			t.Fatalf("after a send made by variables: mesh_sends_total{trigger=\"variables\"} = %v, want 1", n)
		}
	})
}

// TestMetrics_SchedulerLatency: /metrics carries the Go scheduler's
// latencies (how long runnable goroutines wait for a CPU), beside the
// runtime's defaults: what a controller starved of CPU (a flood, a
// fan-out on too few cores) shows first.
func TestMetrics_SchedulerLatency(t *testing.T) {
	e := ctltest.Start(t, "sqlite")
	resp, err := http.Get(e.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"go_sched_latencies_seconds_bucket{", "go_sched_latencies_seconds_count ", "go_goroutines "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}
