package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mesh/store"
)

// TestDashboard_AnOpenReportStaysOpenAcrossTheLiveRefresh: a person opens
// a send's report on the machine page to read what its host did; the
// page's live refresh (every 2 s) swapped the whole status in closed, so
// the report snapped shut under them, every time.
func TestDashboard_AnOpenReportStaysOpenAcrossTheLiveRefresh(t *testing.T) {
	exe := chromium(t)
	c := startController(t, store.SQLite)
	c.module("motd")
	c.upload("motd", `{"resources": [{"name": "motd", "kind": "file", "path": "/etc/motd", "content": "hello from ${machine.name}\n"}]}`, nil)
	h := enroll(t, c, "m1", c.URL)
	h.start()
	c.assign("m1", "motd")
	c.waitApplied("m1", 30*time.Second)

	ctx := newBrowser(t, exe)
	login(t, ctx, c.URL, "admin", c.AdminPW)
	const report = `#sends tbody tr:first-child details`
	run(t, ctx, "open m1's latest report", chromedp.Navigate(c.URL+"/machines/m1"),
		chromedp.WaitVisible(css(report+` summary`)), chromedp.Click(css(report+` summary`)))
	if !get(t, ctx, "opened", chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q).open`, report))) {
		t.Fatal("clicking the summary did not open the report")
	}
	// Two live refreshes of the status, counted as they land.
	get(t, ctx, "count refreshes", chromedp.Evaluate[bool](
		`(window.swaps = 0, document.body.addEventListener('htmx:afterSwap', () => window.swaps++), true)`))
	get(t, ctx, "two refreshes", chromedp.Poll[bool](`window.swaps >= 2`))
	if !get(t, ctx, "still open", chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q).open`, report))) {
		t.Fatal("the report the person opened was closed by the page's live refresh")
	}
}
