package api_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestWebhooks_AGitHubFormEncodedPushIsTaken: GitHub's webhooks are
// form-encoded unless told otherwise (its API's content_type defaults to
// "form", the settings page offers application/x-www-form-urlencoded
// first): the body is payload=<the JSON, URL-encoded>, and the signature
// is over those raw bytes. Such a source's ping was answered "pong" (the
// forge showed it green) and then every push was refused 400 "not a push
// event", nothing ever built.
func TestWebhooks_AGitHubFormEncodedPushIsTaken(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet"})
		post := func(event, delivery string, payload []byte) (int, hookResult, string) {
			form := []byte(url.Values{"payload": {string(payload)}}.Encode())
			resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/src", Body: form, Header: map[string]string{
				"Content-Type":   "application/x-www-form-urlencoded",
				"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + sign(form)}})
			var r hookResult
			_ = json.Unmarshal(out, &r)
			return resp.StatusCode, r, string(out)
		}
		if st, r, raw := post("ping", "p-1", []byte(`{"zen": "Keep it logically awesome.", "hook_id": 1}`)); st != 200 || r.Status != "pong" {
			t.Fatalf("form-encoded ping: %d %s", st, raw)
		}
		st, r, raw := post("push", "d-1", pushOf(strings.Repeat("a", 40), strings.Repeat("b", 40), 0, "web/x"))
		if st != 200 || r.Merge == nil || len(r.Builds) != 1 {
			t.Fatalf("a form-encoded GitHub push (its ping was answered pong) was not merged: %d %s", st, strings.TrimSpace(raw))
		}
	})
}

// TestWebhooks_AForcedPushDroppingCommitsRebuildsWhatTheyTouched: main is
// at B, whose commit touched web/ (web built from B). The branch is forced
// to C, a commit onto A touching only docs/: B's change to web is gone
// from the branch, but a forced push lists only the commits new to it
// (GitHub says "forced": true), so web, judged by the listed paths alone,
// was not built and keeps running B's code, which the branch no longer
// has. A forced push's listed commits are not all it changed: it touches
// every module, as a push listed in part does.
func TestWebhooks_AForcedPushDroppingCommitsRebuildsWhatTheyTouched(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet", "source_paths": []string{"web/"}})
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
			Body: map[string]any{"name": "docs", "repository": "octo-org/fleet", "source_paths": []string{"docs/"}}}, 201, nil)
		x, a, b, c := strings.Repeat("1", 40), strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
		if st, r, raw := postPush(e, "src", "github", "d1", pushOf(x, a, 0, "web/1", "docs/1")); st != 200 || len(r.Builds) != 2 {
			t.Fatalf("X → A: %d %s", st, raw)
		}
		if st, r, raw := postPush(e, "src", "github", "d2", pushOf(a, b, 0, "web/2")); st != 200 || len(r.Builds) != 1 || r.Builds[0].Module != "web" {
			t.Fatalf("A → B: %d %s", st, raw)
		}
		// git reset --hard A; commit docs/2; git push --force: B → C.
		var p map[string]any
		_ = json.Unmarshal(pushOf(b, c, 0, "docs/2"), &p)
		p["forced"] = true
		forced, _ := json.Marshal(p)
		st, r, raw := postPush(e, "src", "github", "d3", forced)
		built := map[string]bool{}
		for _, q := range r.Builds {
			built[q.Module] = true
		}
		if st != 200 || !built["web"] {
			t.Fatalf("a forced push B → C dropped B's change to web/, yet web was not built (it keeps running B): %d %s", st, strings.TrimSpace(raw))
		}
	})
}

// TestWebhooks_OneCapturedDeliveryDoesNotWriteWithoutEnd: the delivery id
// is an unsigned header, and a good signature is never limited. One
// captured signed delivery (a ping: the forge shows its body) posted again
// under fresh ids by an outsider wrote a delivery row and an audit row
// each time, without bound, and the audit log drowned in "pong"s of a
// forge that sent one. A body already taken is on the record a row a
// minute, and so is a delivery id received before.
func TestWebhooks_OneCapturedDeliveryDoesNotWriteWithoutEnd(t *testing.T) {
	e := ctltest.Start(t, "sqlite")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
		Body: map[string]string{"name": "app", "kind": "github", "repository": "o/app", "default_branch": "main", "secret": hookSecret}}, 201, nil)
	ping := []byte(`{"zen": "Design for failure.", "hook_id": 42, "hook": {"type": "Repository"}}`)
	const n = 300
	for i := 0; i < n; i++ {
		resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: ping, Header: map[string]string{
			"X-GitHub-Event": "ping", "X-GitHub-Delivery": fmt.Sprintf("forged-%d", i), "X-Hub-Signature-256": "sha256=" + sign(ping)}})
		if resp.StatusCode == 429 {
			return // limited: held
		}
		if resp.StatusCode != 200 {
			t.Fatalf("replay %d: %d %s", i, resp.StatusCode, out)
		}
	}
	for i := 0; i < 50; i++ {
		resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: ping, Header: map[string]string{
			"X-GitHub-Event": "ping", "X-GitHub-Delivery": "forged-0", "X-Hub-Signature-256": "sha256=" + sign(ping)}})
		if resp.StatusCode != 200 {
			t.Fatalf("replay of one id %d: %d %s", i, resp.StatusCode, out)
		}
	}
	var audit struct {
		Items []struct{ Action, Detail string }
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=source/app&limit=500", Token: e.Admin}, 200, &audit)
	rows := 0
	for _, ev := range audit.Items {
		if ev.Action == "webhook" || ev.Action == "webhook-replay" {
			rows++
		}
	}
	if rows > 10 {
		t.Fatalf("one signed ping posted %d times under fresh delivery ids wrote %d audit rows (and as many delivery rows)", n, rows)
	}
}

// TestWebhooks_ASignedDeliveryWithAnUnreadableIDIsOnTheRecord: the event
// and delivery headers are unsigned; HTTP lets their bytes be any octet
// past 0x7f. A signed body posted with a delivery id that is not UTF-8
// was refused 400 on PostgreSQL (its TEXT takes none) with nothing on the
// record, and taken on SQLite — "every refused delivery is on the record",
// a signed one refused for its headers too.
func TestWebhooks_ASignedDeliveryWithAnUnreadableIDIsOnTheRecord(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
			Body: map[string]string{"name": "app", "kind": "gitea", "repository": "o/app", "default_branch": "main", "secret": hookSecret}}, 201, nil)
		ping := []byte(`{}`)
		resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: ping, Header: map[string]string{
			"X-Gitea-Event": "ping", "X-Gitea-Delivery": "marker-\xff\xfe", "X-Gitea-Signature": sign(ping)}})
		if resp.StatusCode >= 500 {
			t.Fatalf("a signed delivery whose id is not UTF-8: %d %s", resp.StatusCode, strings.TrimSpace(string(out)))
		}
		var audit struct {
			Items []struct{ Action, Detail string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=source/app", Token: e.Admin}, 200, &audit)
		for _, ev := range audit.Items {
			if strings.Contains(ev.Detail, "marker-") {
				return
			}
		}
		t.Fatalf("the delivery (%d %s) is not on the record: %+v", resp.StatusCode, strings.TrimSpace(string(out)), audit.Items)
	})
}
