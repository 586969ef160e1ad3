package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"mesh/controller/ctltest"
	"mesh/store"
)

// chromium finds Debian's chromium; the test fails instead of skipping
// when MESH_TEST_REQUIRE_BROWSER is set (CI sets it).
func chromium(t *testing.T) string {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("MESH_TEST_REQUIRE_BROWSER") != "" {
		t.Fatal("MESH_TEST_REQUIRE_BROWSER is set but no chromium is installed (apt-get install chromium)")
	}
	t.Skip("no chromium installed; the browser test is skipped")
	return ""
}

// newBrowser starts a headless chromium of its own (its own cookies).
func newBrowser(t *testing.T, exe string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	watch(t, ctx)
	return ctx
}

// watch fails the test, at its end, on anything the tab's console shows
// as an error: an error logged or thrown, a request that failed or was
// blocked (by the Content-Security-Policy, say), a resource answered 4xx
// or 5xx (the missing favicon's 404 was one on every page). A page
// answered 4xx on purpose (a stale save's 409) is not a failed resource.
func watch(t *testing.T, ctx context.Context) {
	var mu sync.Mutex
	var seen []string
	documents := map[network.RequestID]bool{}
	add := func(s string) {
		seen = append(seen, s)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			add(fmt.Sprintf("uncaught exception: %s (%s:%d)", msg, d.URL, d.LineNumber))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				add("console." + string(ev.Type) + ": " + strings.Join(args, " "))
			}
		case *network.EventResponseReceived:
			if ev.Type == network.ResourceTypeDocument {
				documents[ev.RequestID] = true
			} else if ev.Response.Status >= 400 {
				add(fmt.Sprintf("%s %s: %d", ev.Type, ev.Response.URL, ev.Response.Status))
			}
		case *network.EventLoadingFailed:
			if !ev.Canceled {
				add(fmt.Sprintf("request failed: %s %s %s", ev.Type, ev.ErrorText, ev.BlockedReason))
			}
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError && !documents[ev.Entry.NetworkRequestID] {
				add(fmt.Sprintf("%s: %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatalf("watching the console: %v", err)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range seen {
			t.Errorf("browser console: %s", s)
		}
	})
}

// tab opens another tab in the same browser (same cookies).
func tab(t *testing.T, ctx context.Context) context.Context {
	c, cancel := chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	// The first call opens the tab and must not carry a timeout: the tab
	// lives as long as that call's context.
	if err := chromedp.Do(c); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	watch(t, c)
	return c
}

func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one action that returns a value.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

type css = chromedp.CSS

func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	buf := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

func login(t *testing.T, ctx context.Context, url, user, pw string) {
	run(t, ctx, "log in as "+user,
		chromedp.Navigate(url+"/login"),
		chromedp.WaitVisible(css(`#username`)),
		chromedp.SendKeys(css(`#username`), user),
		chromedp.SendKeys(css(`#password`), pw),
		chromedp.Click(css(`button[type=submit]`)),
		chromedp.WaitVisible(css(`#machines`)))
}

// TestDashboard_InABrowser drives the dashboard in headless chromium:
// log in; assign a module; the machine goes behind → current without a
// reload, and its new send appears; a refused report shows as refused
// with its reason; two tabs save the same machine — the second gets the
// conflict message and nothing is overwritten; a viewer can change nothing;
// and no page it visits logs an error or a failed request.
func TestDashboard_InABrowser(t *testing.T) {
	exe := chromium(t)
	shots := filepath.Join(os.TempDir(), "mesh-screenshots", time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)

	c := startController(t, store.SQLite)
	c.module("motd")
	c.upload("motd", `{"resources": [{"name": "motd", "kind": "file", "path": "/etc/motd", "content": "hello from ${machine.name}\n"}]}`, nil)
	c.module("unbuilt")
	h := enroll(t, c, "m1", c.URL)
	h.start()
	c.waitApplied("m1", 30*time.Second)
	c.AddUser("vera", "viewer")

	ctx := newBrowser(t, exe)
	login(t, ctx, c.URL, "admin", c.AdminPW)
	run(t, ctx, "overview", chromedp.WaitVisible(css(`tr[data-machine="m1"] [data-state=current]`)))
	shot(t, ctx, shots, "01-overview")

	// The host is stopped, so the assignment is seen behind first.
	h.signal(syscall.SIGTERM)
	run(t, ctx, "open m1", chromedp.Navigate(c.URL+"/machines/m1"), chromedp.WaitVisible(css(`#m_motd`)))
	sendsBefore := get(t, ctx, "count sends", chromedp.Evaluate[int](`document.querySelectorAll('#sends tbody tr').length`))
	run(t, ctx, "assign motd",
		chromedp.Click(css(`#m_motd`)),
		chromedp.Click(css(`#assignments button[type=submit]`)),
		chromedp.WaitVisible(css(`#status [data-state=behind]`)))
	shot(t, ctx, shots, "02-behind")
	get(t, ctx, "mark the page", chromedp.Evaluate[int](`window.meshMark = 1; 1`))
	h.start()
	gen := c.machine("m1").Generation
	run(t, ctx, "current without a reload",
		chromedp.WaitVisible(css(`#status [data-state=current]`)),
		chromedp.WaitVisible(css(`#sends tbody tr:first-child [data-state=applied]`)))
	mark := get(t, ctx, "same page", chromedp.Evaluate[int](`window.meshMark || 0`))
	sendsAfter := get(t, ctx, "count sends", chromedp.Evaluate[int](`document.querySelectorAll('#sends tbody tr').length`))
	firstGen := get(t, ctx, "newest send", chromedp.Text(css(`#sends tbody tr:first-child td:nth-child(2)`)))
	if mark != 1 {
		t.Fatal("the page was reloaded; the change should have appeared live")
	}
	if sendsAfter != sendsBefore+1 || firstGen != fmt.Sprint(gen) {
		t.Fatalf("sends %d → %d, newest generation %q (want %d)", sendsBefore, sendsAfter, firstGen, gen)
	}
	shot(t, ctx, shots, "03-current")

	// A refused report shows as refused, with its reason.
	c.assign("m1", "unbuilt")
	run(t, ctx, "refused shown", chromedp.WaitVisible(css(`#status [data-state=refused]`)))
	badge := get(t, ctx, "refused badge", chromedp.Text(css(`#status [data-state=refused]`)))
	if !strings.Contains(badge, "empty declaration without empty_ok") {
		t.Fatalf("refused badge says %q", badge)
	}
	shot(t, ctx, shots, "04-refused")

	// Two tabs on the same machine: save in one, then in the other.
	a, b := tab(t, ctx), tab(t, ctx)
	for _, x := range []context.Context{a, b} {
		run(t, x, "open in a tab", chromedp.Navigate(c.URL+"/machines/m1"), chromedp.WaitVisible(css(`#m_motd`)))
	}
	run(t, a, "save in tab A",
		chromedp.Click(css(`#m_unbuilt`)), // unassign the unbuilt module
		chromedp.Click(css(`#m_motd`)),
		chromedp.Click(css(`#assignments button[type=submit]`)),
		chromedp.WaitVisible(css(`.saved`)))
	run(t, b, "save in tab B",
		chromedp.Click(css(`#m_motd`)),
		chromedp.SendKeys(css(`#r_motd`), "typed in tab B"),
		chromedp.Click(css(`#assignments button[type=submit]`)),
		chromedp.WaitVisible(css(`#notice`)))
	notice := get(t, b, "notice", chromedp.Text(css(`#notice`)))
	reason := get(t, b, "reason field", chromedp.Value(css(`#r_motd`)))
	if !strings.Contains(notice, "Not saved: m1 changed since you opened this page") || reason != "typed in tab B" {
		t.Fatalf("tab B: notice %q, reason field %q", notice, reason)
	}
	shot(t, b, shots, "05-conflict")
	var as struct {
		Assignments []struct{ Module, Reason string }
	}
	c.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: c.Admin}, 200, &as)
	if len(as.Assignments) != 1 || as.Assignments[0].Module != "motd" || as.Assignments[0].Reason != "" {
		t.Fatalf("tab B's stale save changed the store: %+v", as.Assignments)
	}

	// A change that cannot be composed: the overview says why m1 is behind.
	c.module("needs-port")
	c.upload("needs-port", `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/p.conf", "content": "port=${var.port}\n"}]}`, nil)
	c.assign("m1", "motd", "needs-port")
	run(t, ctx, "overview", chromedp.Navigate(c.URL+"/"))
	// The live table shows it once the change has been composed.
	get(t, ctx, "cannot compose shown",
		chromedp.Poll[bool](`document.querySelector('tr[data-machine="m1"] [data-state=behind]')?.textContent.includes('cannot be composed')`))
	why := get(t, ctx, "behind badge", chromedp.Text(css(`tr[data-machine="m1"] [data-state=behind]`)))
	if !strings.Contains(why, "cannot be composed") || !strings.Contains(why, "port") {
		t.Fatalf("behind badge says %q", why)
	}
	shot(t, ctx, shots, "06-cannot-compose")

	// Every other page loads with nothing in the console (watch).
	for _, p := range []string{"/modules", "/plans", "/releases", "/instances", "/audit"} {
		run(t, ctx, "open "+p, chromedp.Navigate(c.URL+p), chromedp.WaitVisible(css(`main h1, main h2, main table`)))
	}

	// A viewer sees, and cannot change.
	v := newBrowser(t, exe)
	login(t, v, c.URL, "vera", "password-of-vera")
	run(t, v, "viewer's machine page", chromedp.Navigate(c.URL+"/machines/m1"), chromedp.WaitVisible(css(`#status`)))
	forms := get(t, v, "forms", chromedp.Evaluate[int](`document.querySelectorAll('form[action^="/machines/"]').length`))
	if forms != 0 {
		t.Fatalf("a viewer is offered %d forms that change things", forms)
	}
	run(t, v, "phone width", chromedp.EmulateViewport(375, 800))
	shot(t, v, shots, "07-viewer-phone")
}
