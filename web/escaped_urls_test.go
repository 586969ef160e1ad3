package web_test

import (
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestOverview_RefreshKeepsTheSearch: the overview's table refreshes every
// 2 s from the URL in its hx-get, which pasted the search in unescaped: a
// search of "#" or "%" (or one holding "&q=") refreshed as another search
// (here: none), and the table, under a search box still saying "#",
// filled with machines that did not match.
func TestOverview_RefreshKeepsTheSearch(t *testing.T) {
	_, op, _ := fixture(t)
	hxGet := regexp.MustCompile(`<div id="machines" hx-get="([^"]*)"`)
	for _, q := range []string{"#", "%", "&q=m1"} {
		st, body := op.get("/?q=" + url.QueryEscape(q))
		if st != 200 {
			t.Fatalf("GET /?q=%s: %d", q, st)
		}
		if strings.Contains(body, `data-machine="m1"`) {
			t.Fatalf("search %q matches m1 on the page", q)
		}
		m := hxGet.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no hx-get on #machines:\n%.500s", body)
		}
		refresh := html.UnescapeString(m[1])
		st, frag := op.get(refresh)
		if st != 200 {
			t.Errorf("search %q: its refresh %s: %d", q, refresh, st)
			continue
		}
		if strings.Contains(frag, `data-machine="m1"`) {
			t.Errorf("search %q: the page shows no machine, but its live refresh (%s) shows m1", q, refresh)
		}
	}
}

// TestRolloutPage_VersionEscapedInLinks: a host release's version may hold
// any printable character (models.ValidVersion), and the dashboard linked
// its rollout page, and refreshed that page every 2 s, by a path with the
// version pasted in: for "1.6.0#rc" both asked for /releases/1.6.0 (404),
// so the link never opened the rollout and the page's live update froze.
func TestRolloutPage_VersionEscapedInLinks(t *testing.T) {
	e, _, vw := fixture(t)
	const version = "1.6.0#rc"
	if resp, b := e.UploadRelease(e.Admin, version, []byte("a mesh-host binary")); resp.StatusCode != 201 {
		t.Fatalf("release %q: %d %s", version, resp.StatusCode, b)
	}
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host-releases/" + url.PathEscape(version) + "/rollout", Token: e.Admin, Body: map[string]any{"canary": 1}}, 201, nil)

	page := "/releases/" + url.PathEscape(version) + "/rollout"
	st, body := vw.get(page)
	if st != 200 || !strings.Contains(body, "Rollout of host release "+html.EscapeString(version)) {
		t.Fatalf("GET %s: %d\n%.300s", page, st, body)
	}
	_, rel := vw.get("/releases")
	m := regexp.MustCompile(`href="(/releases/[^"]*/rollout)"`).FindStringSubmatch(rel)
	if m == nil {
		t.Fatalf("/releases links no rollout:\n%.800s", rel)
	}
	if link := html.UnescapeString(m[1]); link != page {
		t.Errorf("/releases links the rollout of %q as %q, want %q", version, link, page)
	}
	h := regexp.MustCompile(`<div id="rollout" hx-get="([^"]*)"`).FindStringSubmatch(body)
	if h == nil {
		t.Fatalf("no hx-get on #rollout:\n%.800s", body)
	}
	refresh := html.UnescapeString(h[1])
	if st, b := vw.get(refresh); st != 200 || !strings.Contains(b, "Rollout of host release "+html.EscapeString(version)) {
		t.Errorf("the rollout page of %q refreshes from %q: %d", version, refresh, st)
	}
}
