package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/controller/ctltest"
	"mesh/models"
)

// report records a send of machine's current generation and the host's
// report naming it: applied, running build b of node-tools, with checks.
func report(t *testing.T, e *ctltest.Env, machine string, b int64, checks ...models.CheckResult) {
	t.Helper()
	ctx := context.Background()
	st := e.Ctl.Store
	m, err := st.Machine(ctx, machine)
	if err != nil {
		t.Fatal(err)
	}
	snd := models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: m.ID, Generation: m.Generation, InstanceID: "test", CreatedAt: time.Now().UTC()}
	if err := st.InsertSends(ctx, []models.Send{snd}); err != nil {
		t.Fatal(err)
	}
	r := &models.Report{Send: snd.ID, Generation: m.Generation, Outcome: models.OutcomeApplied,
		Running: map[string]models.RunningBuild{"node-tools": {Build: b}}, Checks: checks}
	if _, err := st.InsertReport(ctx, m.ID, r, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
}

// haltedPlan: m1 and m2 run build 1 of node-tools; build 2's plan reaches
// the canary m1, whose check has failed for two minutes, and halts. It
// returns the plan's id.
func haltedPlan(t *testing.T, e *ctltest.Env) int64 {
	t.Helper()
	ctx := context.Background()
	for _, n := range []string{"m1", "m2"} {
		if n != "m1" {
			e.Enroll(n)
		}
		m, _ := e.Ctl.Store.Machine(ctx, n)
		g := m.Generation
		if _, err := e.Ctl.Store.SetAssignments(ctx, "test", n, &g, []models.AssignmentView{{Module: "node-tools"}}); err != nil {
			t.Fatal(err)
		}
		report(t, e, n, 1)
	}
	if resp, b := e.Upload(e.Admin, "node-tools", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": "y\n"}]}`, nil, ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %s", b)
	}
	ps, err := e.Ctl.Store.Plans(ctx, 1, 0)
	if err != nil || len(ps) != 1 {
		t.Fatalf("build 2 made no plan: %v %v", ps, err)
	}
	// The controller last heard m1's checks three minutes ago; the one
	// that fails now has failed since two minutes ago, past the grace.
	if err := e.Ctl.Store.DB().Exec("UPDATE machines SET health = ?, health_at = ? WHERE name = 'm1'", models.HealthPassing, time.Now().Add(-3*time.Minute).UTC()).Error; err != nil {
		t.Fatal(err)
	}
	report(t, e, "m1", 2, models.CheckResult{Resource: "node-tools.svc", OK: false, At: time.Now().Add(-2 * time.Minute).UTC(), Detail: "connection refused"})
	if err := e.Ctl.Store.StepPlans(ctx); err != nil {
		t.Fatal(err)
	}
	v, _ := e.Ctl.Store.Plan(ctx, ps[0].ID)
	if v.State != models.PlanHalted {
		t.Fatalf("the plan did not halt: %s %q", v.State, v.Reason)
	}
	return v.ID
}

// TestPlanPage_SaysWhyAndWhere: /plans/{id} used to answer a JSON problem
// (no such route on the dashboard). It is the plan's page: module, build,
// its state, the reason in a banner when halted, each tier's progress and
// each machine's step with why, and the actions the state allows, only to
// an operator.
func TestPlanPage_SaysWhyAndWhere(t *testing.T) {
	e, op, vw := fixture(t)
	id := haltedPlan(t, e)
	path := fmt.Sprintf("/plans/%d", id)
	// m3 runs the module pinned by a person: no step of the plan, and the
	// page says so (nothing did: a done plan's build read as everyone's).
	e.Enroll("m3")
	m3, _ := e.Ctl.Store.Machine(context.Background(), "m3")
	one := int64(1)
	if _, err := e.Ctl.Store.SetAssignments(context.Background(), "test", "m3", &m3.Generation,
		[]models.AssignmentView{{Module: "node-tools", Build: &one, Reason: "held for the audit"}}); err != nil {
		t.Fatal(err)
	}

	st, body := vw.get(path)
	if st != 200 || !strings.Contains(body, fmt.Sprintf("<title>Plan %d · mesh</title>", id)) {
		t.Fatalf("GET %s: %d, want the plan's page:\n%.300s", path, st, body)
	}
	for _, want := range []string{
		"node-tools build 2", `data-state="halted"`, `class="banner"`,
		"Halted.</strong> tier 1 of 2 (canary): m1 check node-tools.svc unhealthy since", "connection refused", "not reached yet",
		"tier 1 of 2 (canary)", "tier 2 of 2", `<progress value="0" max="1"`, "0 of 1 machine(s) applied",
		`data-machine="m1"`, `data-machine="m2"`, `data-state="failed"`, `data-state="pending"`, ">build 1<",
		`hx-trigger="every 2s"`, `id="pinned-aside"`, `<li data-machine="m3"><a href="/machines/m3">m3</a> at build 1`, "held for the audit",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the plan page lacks %q", want)
		}
	}
	if strings.Contains(body, `action="/plans/`) {
		t.Error("a viewer is offered an action")
	}

	_, body = op.get(path)
	for _, a := range []string{"resume", "cancel", "rollback"} {
		if !strings.Contains(body, fmt.Sprintf(`action="%s/%s"`, path, a)) {
			t.Errorf("an operator is not offered %s on a halted plan", a)
		}
	}
	if strings.Contains(body, path+"/pause") {
		t.Error("a halted plan offers pause")
	}

	if st, _ := op.get("/plans/999"); st != 404 {
		t.Errorf("GET /plans/999: %d, want 404", st)
	}
}

// TestPlanPage_FragmentForHTMX: the same URL with HX-Request is only the
// progress fragment htmx swaps in every 2 s.
func TestPlanPage_FragmentForHTMX(t *testing.T) {
	e, op, _ := fixture(t)
	id := haltedPlan(t, e)
	resp, body := op.htmx(fmt.Sprintf("/plans/%d", id))
	if resp.StatusCode != 200 || strings.Contains(body, "<html") || !strings.HasPrefix(strings.TrimSpace(body), `<div id="plan"`) ||
		!strings.Contains(body, "m1 check node-tools.svc unhealthy") || !strings.Contains(body, `name="_csrf"`) {
		t.Fatalf("fragment: %d\n%.400s", resp.StatusCode, body)
	}
}

// TestPlanActions_RollBackFromThePage: the operator's "Roll back" posts to
// the dashboard (CSRF checked) and goes through the API's store call: the
// plan is rolled back, m1 pinned to build 1; the page says so and stops
// polling; an action the state no longer allows changes nothing.
func TestPlanActions_RollBackFromThePage(t *testing.T) {
	e, op, vw := fixture(t)
	id := haltedPlan(t, e)
	path := fmt.Sprintf("/plans/%d", id)
	ctx := context.Background()

	op.get(path)
	if st, _ := op.post(path+"/rollback", url.Values{}, false); st != 403 {
		t.Fatalf("a rollback without the CSRF token: %d, want 403", st)
	}
	vw.get(path)
	if st, _ := vw.post(path+"/rollback", url.Values{}, true); st != 403 {
		t.Fatalf("a viewer's rollback: %d, want 403", st)
	}
	if v, _ := e.Ctl.Store.Plan(ctx, id); v.State != models.PlanHalted {
		t.Fatalf("a refused rollback changed the plan: %s", v.State)
	}

	// The page names the tier it shows; an act from a page the plan has
	// moved on from changes nothing.
	v0, _ := e.Ctl.Store.Plan(ctx, id)
	if _, body := op.get(path); !strings.Contains(body, `name="tier" value="0"`) || !strings.Contains(body, fmt.Sprintf(`name="moves" value="%d"`, v0.Moves)) {
		t.Fatalf("the plan's actions do not say the plan they were offered on (moves %d):\n%s", v0.Moves, body)
	}
	st, body := op.post(path+"/rollback", url.Values{"tier": {"1"}}, true)
	if st != 409 || !strings.Contains(body, "Nothing was changed") || !strings.Contains(body, "has moved on since it was read (at tier 2 of 2)") ||
		!strings.Contains(body, fmt.Sprintf(`<a href="%s">Back to plan %d, as it is now</a>`, path, id)) {
		t.Fatalf("a rollback from a page at another tier: %d\n%.2000s", st, body)
	}
	// A page from before the plan's last move (a second click, another
	// person's act since) changes nothing either.
	st, body = op.post(path+"/rollback", url.Values{"moves": {fmt.Sprint(v0.Moves - 1)}}, true)
	if st != 409 || !strings.Contains(body, "has changed since it was read") {
		t.Fatalf("a rollback from a page before the plan's last move: %d\n%.400s", st, body)
	}
	if v, _ := e.Ctl.Store.Plan(ctx, id); v.State != models.PlanHalted {
		t.Fatalf("a refused rollback changed the plan: %s", v.State)
	}

	st, loc := op.post(path+"/rollback", url.Values{"tier": {"0"}, "moves": {fmt.Sprint(v0.Moves)}}, true)
	if st != 303 || loc != path {
		t.Fatalf("rollback: %d %s", st, loc)
	}
	v, _ := e.Ctl.Store.Plan(ctx, id)
	as, _, _ := e.Ctl.Store.Assignments(ctx, "m1")
	if v.State != models.PlanRolledBack || len(as) != 1 || as[0].Build == nil || *as[0].Build != 1 {
		t.Fatalf("after the rollback: plan %s, m1's assignments %+v", v.State, as)
	}
	_, body = op.get(loc)
	for _, want := range []string{"Roll back: the plan is now rolled back", `data-state="rolled_back"`, ">rolled back<",
		"rolled back by user:olga: 1 machine(s) pinned to the build each ran before"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page after the rollback lacks %q", want)
		}
	}
	if strings.Contains(body, `action="/plans/`) || strings.Contains(body, "hx-trigger") {
		t.Error("a rolled back plan still offers actions or polls")
	}
	// m2's step, never reached, is not said pending as if still to come.
	if strings.Contains(body, `data-state="pending"`) || !strings.Contains(body, "never reached: the plan was rolled back first") || !strings.Contains(body, ">never reached<") {
		t.Errorf("the rolled back plan's unreached step:\n%s", body)
	}
	for _, st := range v.Steps {
		if st.Machine == "m2" && (st.State != models.StepWithdrawn || st.FinishedAt == nil) {
			t.Errorf("m2's unreached step of the rolled back plan: %+v", st)
		}
	}

	st, body = op.post(path+"/pause", url.Values{}, true)
	if st != 409 || !strings.Contains(body, "Nothing was changed") || !strings.Contains(body, "rolled back; cannot pause") {
		t.Fatalf("pausing a rolled back plan: %d\n%.300s", st, body)
	}
}

// TestPlansList_LinksAndTierWords: the list links each plan to its page,
// and a finished two-tier plan reads "tier 2 of 2 — done" (it used to say
// "tier 2", its tier counter pointing past the last).
func TestPlansList_LinksAndTierWords(t *testing.T) {
	e, op, _ := fixture(t)
	id := haltedPlan(t, e)
	// Healthy first, then resumed: the controller's own worker steps plans too.
	report(t, e, "m1", 2, models.CheckResult{Resource: "node-tools.svc", OK: true, At: time.Now().UTC(), Detail: "ok"})
	if _, err := e.Ctl.Store.SetPlanState(context.Background(), "test", id, models.PlanResume); err != nil {
		t.Fatal(err)
	}
	waitStep(t, e) // tier 1 done: m2 is reached
	report(t, e, "m2", 2)
	waitStep(t, e)
	v, _ := e.Ctl.Store.Plan(context.Background(), id)
	if v.State != models.PlanDone {
		t.Fatalf("plan: %s %q", v.State, v.Reason)
	}
	_, body := op.get("/plans")
	if !strings.Contains(body, fmt.Sprintf(`href="/plans/%d"`, id)) || !strings.Contains(body, "tier 2 of 2 — done") {
		t.Fatalf("the plans list:\n%s", body)
	}
	_, body = op.get(fmt.Sprintf("/plans/%d", id))
	if !strings.Contains(body, "tier 2 of 2 — done") || !strings.Contains(body, "1 of 1 machine(s) applied") {
		t.Fatalf("the done plan's page lacks its words")
	}
}

func waitStep(t *testing.T, e *ctltest.Env) {
	t.Helper()
	if err := e.Ctl.Store.StepPlans(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOverview_CountsUnhealthyAndSaysThresholds: an unhealthy machine is
// counted (the counts used to leave unhealthy out), and the legend says
// the offline threshold and the unhealthy grace, and how far back the
// record of sends goes.
func TestOverview_CountsUnhealthyAndSaysThresholds(t *testing.T) {
	e, op, _ := fixture(t)
	haltedPlan(t, e)
	_, body := op.get("/ui/machines")
	if !strings.Contains(body, `href="/?state=unhealthy"`) || !strings.Contains(body, "unhealthy 1") {
		t.Fatalf("the counts leave out unhealthy:\n%.600s", body)
	}
	// When the host last said so, beside since when it fails.
	if !strings.Contains(body, "failing since") || !strings.Contains(body, "; as of its report ") {
		t.Fatalf("the unhealthy row does not say when its host last reported its checks:\n%s", body)
	}
	_, body = op.get("/")
	if !strings.Contains(body, "has not polled for 3 minutes") || !strings.Contains(body, "has failed for 90 seconds") {
		t.Fatalf("the legend does not say the thresholds")
	}
	if !strings.Contains(body, "The record of sends goes back to ") || !strings.Contains(body, "are kept 90 days;") {
		t.Fatalf("the overview does not say how far back the record goes")
	}
	// The oldest send on record older than the keep (an idle machine's
	// latest, kept): the record is whole only from keep ago, and says so
	// rather than that it goes back to that send.
	old := time.Now().Add(-200 * 24 * time.Hour).UTC()
	if err := e.Ctl.Store.DB().Exec("UPDATE sends SET created_at = ? WHERE id = (SELECT MIN(id) FROM sends)", old).Error; err != nil {
		t.Fatal(err)
	}
	if _, body = op.get("/"); !strings.Contains(body, "Every send since ") || !strings.Contains(body, "the oldest from "+old.Format("2006-01-02")) {
		t.Fatalf("the overview says the record goes back to a send kept alone:\n%s", body)
	}
	if _, body = op.get("/?state=unhealthy"); !strings.Contains(body, `<option value="unhealthy" selected`) {
		t.Fatal("unhealthy cannot be filtered on")
	}
}

// TestRolloutPage_WavesAndWhy: /releases/{version}/rollout shows a host
// rollout wave by wave, each machine's state, and is linked from
// /releases; htmx gets only its fragment.
func TestRolloutPage_WavesAndWhy(t *testing.T) {
	e, op, vw := fixture(t)
	e.Enroll("m2")
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %s", b)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/1.5.0/rollout", Token: e.Admin, Body: map[string]any{"canary": 1}}, 201, nil)

	_, body := vw.get("/releases")
	if !strings.Contains(body, `href="/releases/1.5.0/rollout"`) {
		t.Fatal("/releases does not link the rollout")
	}
	if !strings.Contains(body, "decodes schemas 1,2") {
		t.Error("/releases does not say which schemas the release decodes")
	}
	st, body := vw.get("/releases/1.5.0/rollout")
	if st != 200 {
		t.Fatalf("rollout page: %d\n%.300s", st, body)
	}
	for _, want := range []string{"Rollout of host release 1.5.0", `data-state="running"`, ">canary<", ">wave 1<",
		`data-machine="m1"`, `data-machine="m2"`, "machine(s) upgraded", `hx-trigger="every 2s"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the rollout page lacks %q", want)
		}
	}
	resp, frag := op.htmx("/releases/1.5.0/rollout")
	if resp.StatusCode != 200 || !strings.HasPrefix(strings.TrimSpace(frag), `<div id="rollout"`) {
		t.Fatalf("fragment: %d\n%.300s", resp.StatusCode, frag)
	}
	if st, _ := vw.get("/releases/9.9.9/rollout"); st != 404 {
		t.Errorf("an unknown rollout: %d, want 404", st)
	}
}

// htmx gets path as htmx's polling does (HX-Request set).
func (b *browser) htmx(path string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("HX-Request", "true")
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// A state filter naming no state is refused with the states there are:
// the page counted the whole fleet over an empty table.
func TestOverview_UnknownStateRefused(t *testing.T) {
	_, op, _ := fixture(t)
	for _, path := range []string{"/?state=bogus", "/ui/machines?state=bogus"} {
		code, body := op.get(path)
		if code != http.StatusBadRequest || !strings.Contains(body, "No state is named &#34;bogus&#34;; the states are current, unhealthy") {
			t.Errorf("GET %s: %d\n%.800s", path, code, body)
		}
	}
	if code, _ := op.get("/?state=unhealthy"); code != http.StatusOK {
		t.Errorf("GET /?state=unhealthy: %d", code)
	}
}

// A search longer than a machine's name is refused, saying so: it matches
// nothing, and each machine of the fleet was searched for it.
func TestOverview_ALongSearchRefused(t *testing.T) {
	_, op, _ := fixture(t)
	long := strings.Repeat("A", 64)
	for _, path := range []string{"/?q=" + long, "/ui/machines?q=" + long} {
		code, body := op.get(path)
		if code != http.StatusBadRequest || !strings.Contains(body, "at most 63 characters, not 64") {
			t.Errorf("GET %s: %d\n%.800s", path, code, body)
		}
	}
	if code, _ := op.get("/?q=" + strings.Repeat("a", 63)); code != http.StatusOK {
		t.Errorf("a search of 63 characters: %d", code)
	}
}

// TestPlanPage_AHaltedPlanHasNotEnded: a plan halted at its canary offers
// Resume; its page said it "ended" at the time it halted.
func TestPlanPage_AHaltedPlanHasNotEnded(t *testing.T) {
	e, _, vw := fixture(t)
	id := haltedPlan(t, e)
	st, body := vw.get(fmt.Sprintf("/plans/%d", id))
	if st != 200 || strings.Contains(body, "; ended ") || !strings.Contains(body, "; halted ") {
		i := strings.Index(body, "Made by")
		t.Fatalf("a halted plan's page: %d %.120s", st, body[max(i, 0):])
	}
}

// TestMachinePage_SaysItsLastHostUpgrade: a host's rollback is over in
// moments (its next generation is applied at once, and it reads current
// again), so its machine's page said nothing of it; it says the newest
// upgrade that reached the machine, how it ended, when and why.
func TestMachinePage_SaysItsLastHostUpgrade(t *testing.T) {
	e, _, vw := fixture(t)
	if resp, b := e.UploadRelease(e.Admin, "1.5.0", []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release: %s", b)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/1.5.0/rollout", Token: e.Admin, Body: map[string]any{"canary": 1}}, 201, nil)
	if _, body := vw.get("/machines/m1"); !strings.Contains(body, "Last upgrade") || !strings.Contains(body, "to 1.5.0: upgrading since ") {
		t.Fatalf("the machine page of a machine upgrading: %.2000s", body)
	}
	if err := e.Ctl.Store.DB().Exec("UPDATE rollout_machines SET state = 'rolled_back', reason = 'it exited before completing a reconcile (exit status 3)', finished_at = ?",
		time.Now().UTC()).Error; err != nil {
		t.Fatal(err)
	}
	if _, body := vw.get("/machines/m1"); !strings.Contains(body, "to 1.5.0: rolled back ") || !strings.Contains(body, "it exited before completing a reconcile (exit status 3)") {
		t.Fatalf("the machine page after its host rolled back: %.2000s", body)
	}
}
