package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestDashboard_PlanHaltsThenRollBackInABrowser walks the honest-status
// scenario in headless chromium with real hosts: build 2's check fails on
// the canary; the plan page, open before it happens, turns halted without
// a reload and says why in a banner; the overview shows the canary
// unhealthy and counts it; the operator clicks "Roll back" and the plan
// reads "rolled back", m1 pinned to build 1. Every page it visits is
// watched for console errors and failed requests (watch). The plan page
// used to be a JSON problem, and the overview's counts left unhealthy out.
func TestDashboard_PlanHaltsThenRollBackInABrowser(t *testing.T) {
	exe := chromium(t)
	shots := filepath.Join(os.TempDir(), "mesh-screenshots", time.Now().Format("20060102-150405")+"-plan")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)

	c := startController(t, store.SQLite, "--unhealthy-after", "2s")
	c.module("node-tools")
	c.upload("node-tools", runtimeManifest, runtimeTree(t))
	for _, n := range []string{"m1", "m2"} {
		h := enroll(t, c, n, c.URL)
		h.start("--check-every", "1s")
		c.setVars(n, map[string]string{"port": freePort(t)})
		c.assign(n, "node-tools")
		c.waitApplied(n, 60*time.Second)
	}

	ctx := newBrowser(t, exe)
	login(t, ctx, c.URL, "admin", c.AdminPW)

	// Build 2's check can never pass: its plan starts on the canary.
	broken := strings.Replace(runtimeManifest, `"check": {"tcp": "127.0.0.1:${var.port}"}`, `"check": {"tcp": "127.0.0.1:1"}`, 1)
	c.upload("node-tools", broken, runtimeTree(t))
	var ps struct{ Items []planView }
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: c.Admin}, 200, &ps)
	id := ps.Items[0].ID

	run(t, ctx, "the plans list links the plan",
		chromedp.Navigate(c.URL+"/plans"),
		chromedp.Click(css(fmt.Sprintf(`a[href="/plans/%d"]`, id))),
		chromedp.WaitVisible(css(`#plan`)))
	get(t, ctx, "mark the page", chromedp.Evaluate[int](`window.meshMark = 1; 1`))
	run(t, ctx, "halted without a reload", chromedp.WaitVisible(css(`#plan [data-state=halted]`)), chromedp.WaitVisible(css(`#plan .banner`)))
	if mark := get(t, ctx, "same page", chromedp.Evaluate[int](`window.meshMark || 0`)); mark != 1 {
		t.Fatal("the plan page was reloaded; the halt should have appeared live")
	}
	banner := get(t, ctx, "banner", chromedp.Text(css(`#plan .banner`)))
	where := get(t, ctx, "where", chromedp.Text(css(`#plan .where`)))
	if !strings.Contains(banner, "tier 1 of 2 (canary): m1 check node-tools.service unhealthy since") || where != "tier 1 of 2 (canary)" {
		t.Fatalf("the halted plan says %q, at %q", banner, where)
	}
	m2 := get(t, ctx, "m2's step", chromedp.Text(css(`#plan tr[data-machine=m2] [data-state]`)))
	if m2 != "pending" {
		t.Fatalf("m2's step reads %q; the second tier must not be reached", m2)
	}
	shot(t, ctx, shots, "02-plan-halted")

	run(t, ctx, "overview",
		chromedp.Navigate(c.URL+"/"),
		chromedp.WaitVisible(css(`tr[data-machine="m1"] [data-state=unhealthy]`)),
		chromedp.WaitVisible(css(`#machines .counts a[href="/?state=unhealthy"]`)),
		chromedp.WaitVisible(css(`#legend`)))
	count := get(t, ctx, "unhealthy count", chromedp.Text(css(`#machines .counts a[href="/?state=unhealthy"]`)))
	legend := get(t, ctx, "legend", chromedp.Text(css(`#legend`)))
	if count != "unhealthy 1" || !strings.Contains(legend, "3 minutes") || !strings.Contains(legend, "2 seconds") {
		t.Fatalf("the overview counts %q, legend %q", count, legend)
	}
	shot(t, ctx, shots, "01-overview-unhealthy")

	run(t, ctx, "roll back from the plan page",
		chromedp.Navigate(fmt.Sprintf("%s/plans/%d", c.URL, id)),
		chromedp.WaitVisible(css(`button[data-action=rollback]`)),
		chromedp.Click(css(`button[data-action=rollback]`)),
		chromedp.WaitVisible(css(`#plan [data-state=rolled_back]`)))
	state := get(t, ctx, "state", chromedp.Text(css(`#plan [data-state=rolled_back]`)))
	saved := get(t, ctx, "saved", chromedp.Text(css(`.saved`)))
	if state != "rolled back" || !strings.Contains(saved, "the plan is now rolled back") {
		t.Fatalf("after the rollback the plan reads %q (%q)", state, saved)
	}
	if n := get(t, ctx, "actions", chromedp.Evaluate[int](`document.querySelectorAll('#plan form').length`)); n != 0 {
		t.Fatalf("a rolled back plan offers %d actions", n)
	}
	var p planView
	c.JSON(ctltest.Request{Method: "GET", Path: fmt.Sprintf("/api/v1/plans/%d", id), Token: c.Admin}, 200, &p)
	if p.State != "rolled_back" {
		t.Fatalf("the API says the plan is %s", p.State)
	}
	waitFor(t, 60*time.Second, "m1 runs build 1 again, healthy", func() bool {
		m := c.machine("m1")
		return m.Running["node-tools"].Build == 1 && m.State == "current"
	})
	shot(t, ctx, shots, "03-plan-rolled-back")

	// The releases page loads without console errors too.
	run(t, ctx, "releases", chromedp.Navigate(c.URL+"/releases"), chromedp.WaitVisible(css(`main h1`)))
}
