package api_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/api"
	"mesh/controller/ctltest"
	"mesh/testwait"
)

const hookSecret = "a-secret-of-some-length"

func sign(body []byte) string {
	m := hmac.New(sha256.New, []byte(hookSecret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

type hookResult struct {
	Status string `json:"status"`
	Merge  *int64 `json:"merge"`
	Builds []struct {
		Module string `json:"module"`
		Number int64  `json:"number"`
	} `json:"builds"`
}

// TestWebhooks_DocumentedPayloads runs the push Gitea documents
// (testdata/gitea-push.json, to refs/heads/develop of gitea/webhooks)
// through every path of the webhook.
func TestWebhooks_DocumentedPayloads(t *testing.T) {
	body, err := os.ReadFile("testdata/gitea-push.json")
	if err != nil {
		t.Fatal(err)
	}
	each(t, func(t *testing.T, e *ctltest.Env) {
		for _, src := range []map[string]string{
			{"name": "gitea", "kind": "gitea", "repository": "gitea/webhooks", "default_branch": "develop", "secret": hookSecret},
			{"name": "github", "kind": "github", "repository": "gitea/webhooks", "default_branch": "develop", "secret": hookSecret},
			{"name": "elsewhere", "kind": "forgejo", "repository": "gitea/webhooks", "default_branch": "main", "secret": hookSecret},
		} {
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin, Body: src}, 201, nil)
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
			Body: map[string]any{"name": "webhooks", "repository": "gitea/webhooks"}}, 201, nil)
		gitea := func(delivery, event string, _ []byte, sig string) map[string]string {
			return map[string]string{"X-Gitea-Event": event, "X-Gitea-Delivery": delivery, "X-Gitea-Signature": sig}
		}
		post := func(source string, h map[string]string, b []byte) (int, hookResult, string) {
			resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/" + source, Body: b, Header: h})
			var r hookResult
			if resp.StatusCode == 200 {
				_ = json.Unmarshal(out, &r)
			}
			return resp.StatusCode, r, string(out)
		}

		// Valid: a merge, a build queued as number 1.
		st, r, raw := post("gitea", gitea("f6266f16-1bf3-46a5-9ea4-602e06ead473", "push", body, sign(body)), body)
		if st != 200 || r.Merge == nil || len(r.Builds) != 1 || r.Builds[0].Number != 1 || !strings.HasPrefix(r.Status, "merged bffeb74") {
			t.Fatalf("valid push: %d %s", st, raw)
		}
		// Replayed: answered, recorded, not acted on twice.
		st, r, raw = post("gitea", gitea("f6266f16-1bf3-46a5-9ea4-602e06ead473", "push", body, sign(body)), body)
		if st != 200 || r.Merge != nil || len(r.Builds) != 0 || !strings.HasPrefix(r.Status, "duplicate") {
			t.Fatalf("replay: %d %s", st, raw)
		}
		// Unsigned, with headers of 30 KiB (a request's header is at most
		// 64 KiB): refused, saying so, and recorded; the refusal's row
		// keeps a line of each (it kept them whole, a megabyte a request).
		st, _, raw = post("gitea", gitea(strings.Repeat("d", 30<<10), strings.Repeat("e", 30<<10), body, ""), body)
		if st != 401 || !strings.Contains(raw, "not signed") {
			t.Fatalf("no signature: %d %s", st, raw)
		}
		// Bad signature: refused; its record is the next minute's (one a
		// minute per source and address, counting the rest).
		st, _, raw = post("gitea", gitea("d2", "push", body, sign([]byte("other"))), body)
		if st != 401 || !strings.Contains(raw, "does not match") {
			t.Fatalf("bad signature: %d %s", st, raw)
		}
		// GitHub's headers, the same documented body, to a second source
		// of the same repository (a mirror): taken, and the commit, merged
		// already through the first, is not built again (it was build 2).
		st, r, raw = post("github", map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "gh-1",
			"X-Hub-Signature-256": "sha256=" + sign(body)}, body)
		if st != 200 || r.Merge != nil || len(r.Builds) != 0 || !strings.HasPrefix(r.Status, "duplicate: commit bffeb74 was already merged") {
			t.Fatalf("github push of a commit merged through another source: %d %s", st, raw)
		}
		// Its next commit is a merge, numbered after the first source's.
		second := bytes.Replace(body, []byte("bffeb74224043ba2feb48d137756c8a9331c449a"), []byte("5ec0d00224043ba2feb48d137756c8a9331c449a"), 1)
		st, r, raw = post("github", map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "gh-2",
			"X-Hub-Signature-256": "sha256=" + sign(second)}, second)
		if st != 200 || len(r.Builds) != 1 || r.Builds[0].Number != 2 {
			t.Fatalf("github push: %d %s (builds are numbered in merge order)", st, raw)
		}
		// Unknown event; ping (each its own body: the same signed bytes
		// under another delivery id are a replay).
		issue, ping := []byte(`{"action": "opened"}`), []byte(`{"zen": "Keep it logically awesome."}`)
		st, r, _ = post("gitea", gitea("d4", "issues", issue, sign(issue)), issue)
		if st != 200 || r.Status != "ignored: event issues" {
			t.Fatalf("unknown event: %d %+v", st, r)
		}
		st, r, _ = post("gitea", gitea("d5", "ping", ping, sign(ping)), ping)
		if st != 200 || r.Status != "pong" {
			t.Fatalf("ping: %d %+v", st, r)
		}
		// A push to a branch that is not the default: ignored, recorded.
		st, r, raw = post("elsewhere", map[string]string{"X-Forgejo-Event": "push", "X-Forgejo-Delivery": "fj-1", "X-Forgejo-Signature": sign(body)}, body)
		if st != 200 || r.Status != "ignored: push to refs/heads/develop, not refs/heads/main" || len(r.Builds) != 0 {
			t.Fatalf("non-default branch: %d %s", st, raw)
		}
		// Oversized.
		big := bytes.Repeat([]byte(" "), 6<<20)
		st, _, _ = post("gitea", gitea("d6", "push", big, sign(big)), big)
		if st != 413 {
			t.Fatalf("oversized: %d", st)
		}
		// The record: every delivery and refusal is in the audit log.
		var audit struct {
			Items []struct{ Action, Detail string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?limit=100", Token: e.Admin}, 200, &audit)
		seen := map[string]int{}
		for _, a := range audit.Items {
			seen[a.Action]++
			if a.Action == "webhook-refused" && len(a.Detail) > 1000 {
				t.Errorf("a refused webhook's audit row is %d bytes", len(a.Detail))
			}
		}
		if seen["merge"] != 2 || seen["webhook-replay"] != 2 || seen["webhook-refused"] != 1 || seen["webhook"] != 3 {
			t.Fatalf("audit: %v", seen)
		}

		// A builder claims the oldest queued build and fills it; the
		// module's first build becomes current, the next gets a plan.
		builder := e.AddUser("ci", "builder")
		var claimed struct {
			ID     int64  `json:"id"`
			Number int64  `json:"number"`
			Commit string `json:"commit"`
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/builds/claim", Token: builder}, 200, &claimed)
		if claimed.Number != 1 || claimed.Commit != "bffeb74224043ba2feb48d137756c8a9331c449a" {
			t.Fatalf("claimed %+v", claimed)
		}
		finish := func(id int64) map[string]any {
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			_ = mw.WriteField("manifest", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/w", "content": "w\n"}]}`)
			w, _ := mw.CreateFormFile("artifact", "a.tar.gz")
			_, _ = w.Write([]byte("artifact bytes"))
			mw.Close()
			var out map[string]any
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/builds/" + itoa(id) + "/artifact", Token: builder, Body: buf.Bytes(),
				Header: map[string]string{"Content-Type": mw.FormDataContentType()}}, 200, &out)
			return out
		}
		if out := finish(claimed.ID); out["plan"] != nil {
			t.Fatalf("the first build got a plan: %v", out)
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/builds/claim", Token: builder}, 200, &claimed)
		out := finish(claimed.ID)
		plan, _ := out["plan"].(map[string]any)
		if plan == nil || plan["build"].(float64) != 2 {
			t.Fatalf("the second build's plan: %v", out)
		}
		if resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/builds/claim", Token: builder}); resp.StatusCode != 204 {
			t.Fatalf("nothing queued: %d", resp.StatusCode)
		}
		// A mesh-host build becomes a host release and a rollout, not a plan.
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
			Body: map[string]any{"name": "mesh-host", "kind": "host", "repository": "gitea/webhooks"}}, 201, nil)
		// The same commit again under a new delivery id is a replay: it
		// builds nothing (it used to queue builds of old code as newer
		// builds); the next commit builds both modules.
		for _, id := range []string{"d7", "d8"} {
			st, r, raw = post("gitea", gitea(id, "push", body, sign(body)), body)
			if st != 200 || len(r.Builds) != 0 || !strings.HasPrefix(r.Status, "duplicate: ") {
				t.Fatalf("the same commit under delivery %s: %d %s", id, st, raw)
			}
		}
		next := bytes.Replace(body, []byte("bffeb74224043ba2feb48d137756c8a9331c449a"), []byte("c0ffee4224043ba2feb48d137756c8a9331c449a"), 1)
		st, r, raw = post("gitea", gitea("d9", "push", next, sign(next)), next)
		if st != 200 || len(r.Builds) != 2 {
			t.Fatalf("push with a host module: %d %s", st, raw)
		}
		// An operator may build, but not make a host release: a claim
		// skips the mesh-host build for the next, and finishing it is 403.
		op := e.AddUser("opa", "operator")
		var opClaimed struct {
			ID     int64  `json:"id"`
			Module string `json:"module"`
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/builds/claim", Token: op}, 200, &opClaimed)
		if opClaimed.Module != "webhooks" {
			t.Fatalf("an operator claimed %+v, want webhooks' build (not mesh-host's)", opClaimed)
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/builds/claim", Token: builder}, 200, &claimed)
		if claimed.Number != 1 { // mesh-host's first; queued in the same merge before webhooks' third
			t.Fatalf("claimed %+v", claimed)
		}
		var opb bytes.Buffer
		ow := multipart.NewWriter(&opb)
		for k, v := range map[string]string{"manifest": `{"resources": []}`, "os": "linux", "arch": "amd64", "version": "6.6.6", "schemas": "1,2"} {
			_ = ow.WriteField(k, v)
		}
		ofw, _ := ow.CreateFormFile("artifact", "mesh-host")
		_, _ = ofw.Write([]byte("an operator's binary"))
		ow.Close()
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/builds/" + itoa(claimed.ID) + "/artifact", Token: op, Body: opb.Bytes(),
			Header: map[string]string{"Content-Type": ow.FormDataContentType()}}, 403, nil)
		// Sent without its platform: refused, nothing committed, the build
		// still the builder's to send again corrected (it used to be left
		// ready with no release, and the retry got 409).
		var bad bytes.Buffer
		bw := multipart.NewWriter(&bad)
		_ = bw.WriteField("manifest", `{"resources": []}`)
		bfw, _ := bw.CreateFormFile("artifact", "mesh-host")
		_, _ = bfw.Write([]byte("a mesh-host binary"))
		bw.Close()
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/builds/" + itoa(claimed.ID) + "/artifact", Token: builder, Body: bad.Bytes(),
			Header: map[string]string{"Content-Type": bw.FormDataContentType()}}, 400, nil)
		var hb bytes.Buffer
		mw := multipart.NewWriter(&hb)
		_ = mw.WriteField("manifest", `{"resources": []}`)
		_ = mw.WriteField("os", "linux")
		_ = mw.WriteField("arch", "amd64")
		_ = mw.WriteField("version", "1.5.0")
		_ = mw.WriteField("schemas", "1,2")
		w, _ := mw.CreateFormFile("artifact", "mesh-host")
		_, _ = w.Write([]byte("a mesh-host binary"))
		mw.Close()
		e.Enroll("m-host")
		var fin struct {
			Rollout *struct {
				Version string `json:"version"`
				State   string `json:"state"`
			} `json:"rollout"`
			Plan any `json:"plan"`
		}
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/builds/" + itoa(claimed.ID) + "/artifact", Token: builder, Body: hb.Bytes(),
			Header: map[string]string{"Content-Type": mw.FormDataContentType()}}, 200, &fin)
		if fin.Rollout == nil || fin.Rollout.Version != "1.5.0" || fin.Rollout.State != "running" || fin.Plan != nil {
			t.Fatalf("a finished mesh-host build: %+v", fin)
		}
		viewer := e.AddUser("vic", "viewer")
		if resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/builds/claim", Token: viewer}); resp.StatusCode != 403 {
			t.Fatalf("a viewer claimed: %d", resp.StatusCode)
		}
	})
}

// TestWebhooks_GitHubPush runs a push in GitHub's shape (testdata/
// github-push.json: a merged pull request on octo-org/fleet, its commits
// touching one module's paths) through a GitHub source: one build queued
// for the module it touches, none for the other; the build names the
// merge commit. The same branch deleted queues nothing.
func TestWebhooks_GitHubPush(t *testing.T) {
	body, err := os.ReadFile("testdata/github-push.json")
	if err != nil {
		t.Fatal(err)
	}
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
			Body: map[string]any{"name": "gh", "kind": "github", "repository": "octo-org/fleet", "default_branch": "main", "secret": hookSecret}}, 201, nil)
		for name, paths := range map[string][]string{"node-tools": {"modules/node-tools/"}, "web": {"modules/web"}} {
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
				Body: map[string]any{"name": name, "repository": "octo-org/fleet", "source_paths": paths}}, 201, nil)
		}
		post := func(delivery string, b []byte) (int, hookResult, string) {
			resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/gh", Body: b, Header: map[string]string{
				"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + sign(b),
				"User-Agent": "GitHub-Hookshot/2c5b4a3"}})
			var r hookResult
			_ = json.Unmarshal(out, &r)
			return resp.StatusCode, r, string(out)
		}
		st, r, raw := post("72d3162e-cc78-11e3-81ab-4c9367dc0958", body)
		if st != 200 || r.Status != "merged 3d3c6d2: 1 build(s) queued" || len(r.Builds) != 1 || r.Builds[0].Module != "node-tools" || r.Builds[0].Number != 1 {
			t.Fatalf("github push: %d %s", st, raw)
		}
		var claimed struct {
			Module string `json:"module"`
			Commit string `json:"commit"`
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/builds/claim", Token: e.AddUser("ci", "builder")}, 200, &claimed)
		if claimed.Commit != "3d3c6d2b1e0f4a5c9b8e7d6c5b4a39281706f5e4" {
			t.Fatalf("claimed %+v, want the merge commit", claimed)
		}

		var p map[string]any
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		p["deleted"], p["after"], p["commits"], p["head_commit"] = true, "0000000000000000000000000000000000000000", []any{}, nil
		deleted, _ := json.Marshal(p)
		st, r, raw = post("72d3162e-cc78-11e3-81ab-4c9367dc0959", deleted)
		if st != 200 || r.Status != "ignored: refs/heads/main was deleted" || len(r.Builds) != 0 {
			t.Fatalf("deleted branch: %d %s", st, raw)
		}
	})
}

// TestWebhooks_BadSignaturesDoNotLockOutGoodOnes: a forge's addresses are
// shared by its users, so someone else's webhook with a wrong secret,
// pointed at this source, got the address limited, and this source's
// correctly signed deliveries from the same address were 429 and lost
// (forges do not retry). A good signature is always taken.
func TestWebhooks_BadSignaturesDoNotLockOutGoodOnes(t *testing.T) {
	e := ctltest.Start(t, "sqlite")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
		Body: map[string]string{"name": "app", "kind": "gitea", "repository": "o/app", "default_branch": "main", "secret": hookSecret}}, 201, nil)
	ping := []byte(`{}`)
	post := func(delivery, sig string) int {
		resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: ping,
			Header: map[string]string{"X-Gitea-Event": "ping", "X-Gitea-Delivery": delivery, "X-Gitea-Signature": sig}})
		return resp.StatusCode
	}
	limited := 0
	for i := range 30 {
		switch st := post(fmt.Sprintf("bad-%d", i), "00"); st {
		case 401:
		case 429:
			limited++
		default:
			t.Fatalf("bad signature %d: %d", i, st)
		}
	}
	if limited == 0 {
		t.Fatalf("30 bad signatures from one address, none limited")
	}
	if st := post("good", sign(ping)); st != 200 {
		t.Fatalf("a correctly signed delivery after others' bad ones: %d, want 200", st)
	}
}

// TestWebhooks_BodiesHeldAtOnceBounded: a webhook's body is read whole
// before its signature can be checked, and 800 senders of 5 MiB bodies
// took the controller past 7 GB. The bytes held at once are bounded, as
// they are read: senders that announce the largest body and send nothing
// hold nothing (a first bound counted what they announced, and 13 idle
// connections refused every delivery), and one address holds at most
// api.HookBodiesPerAddress — past it a read waits, then its delivery is
// refused with when to try again, on the record.
func TestWebhooks_BodiesHeldAtOnceBounded(t *testing.T) {
	e := ctltest.Start(t, "sqlite")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
		Body: map[string]string{"name": "app", "kind": "gitea", "repository": "o/app", "default_branch": "main", "secret": hookSecret}}, 201, nil)
	addr := strings.TrimPrefix(e.URL, "http://")
	// announce opens a delivery of length bytes and sends body of it.
	announce := func(length int, body []byte) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /api/v1/hooks/app HTTP/1.1\r\nHost: x\r\nX-Gitea-Event: push\r\nX-Gitea-Delivery: d\r\nX-Gitea-Signature: 00\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", length)
		go func() { _, _ = c.Write(body) }() // blocks once the server stops reading
		return c
	}
	ping := func() (int, string, time.Duration) {
		b := []byte(`{}`)
		start := time.Now()
		resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: b,
			Header: map[string]string{"X-Gitea-Event": "ping", "X-Gitea-Delivery": fmt.Sprintf("good-%d", start.UnixNano()), "X-Gitea-Signature": sign(b)}})
		return resp.StatusCode, string(out), time.Since(start)
	}

	// Announced, they would take every byte of the bound.
	idle := announce(api.MaxHookBody, []byte("{"))
	for range api.HookBodies/api.MaxHookBody - 1 {
		announce(api.MaxHookBody, []byte("{"))
	}
	announce(api.HookBodies%api.MaxHookBody, []byte("{"))
	if st, out, took := ping(); st != 200 || took > api.HookBodyWait/2 {
		t.Fatalf("a signed delivery beside bodies announced and never sent: %d after %v %s", st, took, out)
	}

	type answer struct {
		status int
		retry  string
		body   string
	}
	answers := make(chan answer, 16)
	almost := append([]byte("{"), bytes.Repeat([]byte(" "), api.MaxHookBody-2)...) // all but the last byte
	for range api.HookBodiesPerAddress/api.MaxHookBody + 1 {
		c := announce(api.MaxHookBody, almost)
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(api.HookBodyWait + 20*time.Second))
			r, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // a sender the server still reads
			}
			b, _ := io.ReadAll(r.Body)
			answers <- answer{r.StatusCode, r.Header.Get("Retry-After"), string(b)}
		}()
	}
	select {
	case a := <-answers:
		if a.status != 429 || a.retry == "" || !strings.Contains(a.body, "webhooks' bodies are being read at once from 127.0.0.1") {
			t.Fatalf("the body past one address's bound: %d %q %s", a.status, a.retry, a.body)
		}
	case <-time.After(api.HookBodyWait + 20*time.Second):
		t.Fatal("the body past one address's bound got no answer")
	}
	// A body still arriving when a forge would have given up on its
	// delivery (10 s) is cut: it held the bound for the 30 s of any body.
	_ = idle.SetReadDeadline(time.Now().Add(api.HookBodyDeadline + 5*time.Second))
	if r, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil || r.StatusCode != 400 {
		t.Fatalf("a body still arriving past %s: %v %v", api.HookBodyDeadline, r, err)
	}

	// Several are refused at once; the one refusal recorded (a row a
	// minute) may be another's, written as this one was answered.
	var audit struct {
		Items []struct{ Action, Detail string }
	}
	if !testwait.Until(5*time.Second, func() bool {
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=source/app", Token: e.Admin}, 200, &audit)
		for _, ev := range audit.Items {
			if ev.Action == "webhook-refused" && strings.Contains(ev.Detail, "being read at once") {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the refusal is not on the record: %+v", audit.Items)
	}
}

// TestWebhooks_SendersWordsBounded: a signed push keeps a line of each of
// its words, whatever their size: a ref of 900 KiB was kept twice a
// delivery (its status and its audit row), and a loop of them filled the
// disk at a gigabyte in 15 s. A commit id that is not one, and headers
// longer than a forge sends, are refused.
func TestWebhooks_SendersWordsBounded(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
			Body: map[string]string{"name": "app", "kind": "gitea", "repository": "o/app", "default_branch": "main", "secret": hookSecret}}, 201, nil)
		post := func(delivery string, push map[string]any) (int, string) {
			b, _ := json.Marshal(push)
			resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: b,
				Header: map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": delivery, "X-Gitea-Signature": sign(b)}})
			return resp.StatusCode, string(out)
		}
		repo := map[string]any{"full_name": "o/app"}
		st, out := post("d1", map[string]any{"ref": "refs/heads/" + strings.Repeat("x", 900<<10), "after": strings.Repeat("a", 40), "repository": repo})
		if st != 200 || !strings.Contains(out, "ignored: push to refs/heads/xxx") || len(out) > 1000 {
			t.Fatalf("a push to a ref of 900 KiB: %d %.300s (%d bytes)", st, out, len(out))
		}
		var audit struct {
			Items []struct{ Action, Detail string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=source/app", Token: e.Admin}, 200, &audit)
		for _, ev := range audit.Items {
			if len(ev.Detail) > 1000 {
				t.Fatalf("%s row of %d bytes", ev.Action, len(ev.Detail))
			}
		}
		if st, out := post("d2", map[string]any{"ref": "refs/heads/main", "after": "not-a-commit", "repository": repo}); st != 400 ||
			!strings.Contains(out, `\"not-a-commit\" is not a commit id`) {
			t.Fatalf("a push whose after is not a commit id: %d %s", st, out)
		}
		if st, out := post(strings.Repeat("d", 129), map[string]any{"ref": "refs/heads/main", "after": strings.Repeat("a", 40), "repository": repo}); st != 400 ||
			!strings.Contains(out, "at most 128 bytes") {
			t.Fatalf("a delivery id of 129 bytes: %d %s", st, out)
		}
	})
}

// TestWebhooks_OnlyFromAllowedAddresses: a source that lists the addresses
// its forge sends from refuses a delivery from elsewhere, signed or not,
// before its body is read (an outsider could otherwise hold the webhook
// bodies' bound from a few addresses), on the record; changing the list
// keeps the source's record. A bad address is refused saying which.
func TestWebhooks_OnlyFromAllowedAddresses(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		var src struct {
			AllowedFrom []string `json:"allowed_from"`
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
			Body: map[string]any{"name": "app", "kind": "gitea", "repository": "o/app", "default_branch": "main", "secret": hookSecret,
				"allowed_from": []string{"192.0.2.0/24", "2001:db8::1"}}}, 201, &src)
		if !slices.Equal(src.AllowedFrom, []string{"192.0.2.0/24", "2001:db8::1"}) {
			t.Fatalf("made with allowed_from %v", src.AllowedFrom)
		}
		ping := []byte(`{}`)
		post := func(delivery string) (int, string) {
			resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: ping,
				Header: map[string]string{"X-Gitea-Event": "ping", "X-Gitea-Delivery": delivery, "X-Gitea-Signature": sign(ping)}})
			return resp.StatusCode, string(b)
		}
		if st, b := post("d1"); st != 403 || !strings.Contains(b, "source app does not take webhooks from 127.0.0.1") {
			t.Fatalf("a signed delivery from an address not allowed: %d %s", st, b)
		}
		// Refused before its body is read: a sender that announces a body
		// and sends none is answered at once, not after the body's 10 s.
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequest("POST", e.URL+"/api/v1/hooks/app", pr)
		req.ContentLength = 4096
		req.Header.Set("X-Gitea-Event", "push")
		ctx, cancel := context.WithTimeout(context.Background(), api.HookBodyDeadline/2)
		defer cancel()
		cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		if resp, err := cl.Do(req.WithContext(ctx)); err != nil || resp.StatusCode != 403 {
			t.Fatalf("a body never sent from an address not allowed: %v %+v", err, resp)
		} else {
			resp.Body.Close()
		}
		// From other addresses, refusals are not a row each (an IPv6 /64
		// is addresses without end): once a minute per source.
		for i := 2; i < 6; i++ {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(i))}}
			from := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}}
			req, _ := http.NewRequest("POST", e.URL+"/api/v1/hooks/app", bytes.NewReader(ping))
			resp, err := from.Do(req)
			if err != nil || resp.StatusCode != 403 {
				t.Fatalf("a delivery from 127.0.0.%d: %v %+v", i, err, resp)
			}
			resp.Body.Close()
		}
		var audit struct {
			Items []struct{ Action, Detail string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=source/app", Token: e.Admin}, 200, &audit)
		if len(audit.Items) != 2 || audit.Items[0].Action != "webhook-refused" || audit.Items[1].Action != "create-source" || !strings.Contains(audit.Items[0].Detail, "from 127.0.0.1: not an address the source takes webhooks from") {
			t.Fatalf("the refusals' record, one row: %+v", audit.Items)
		}

		resp, b := e.Do(ctltest.Request{Method: "PATCH", Path: "/api/v1/sources/app", Token: e.Admin, Body: map[string]any{"allowed_from": []string{"10.0.0.0/8", "nope"}}})
		if resp.StatusCode != 400 || !strings.Contains(string(b), "allowed_from[1]") || !strings.Contains(string(b), `\"nope\" is neither an IP address nor a CIDR prefix`) {
			t.Fatalf("a bad address: %d %s", resp.StatusCode, b)
		}
		e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/sources/app", Token: e.Admin, Body: map[string]any{"allowed_from": []string{"127.0.0.0/8"}}}, 200, &src)
		if st, b := post("d2"); st != 200 {
			t.Fatalf("a delivery from an allowed address: %d %s", st, b)
		}
		e.JSON(ctltest.Request{Method: "PATCH", Path: "/api/v1/sources/app", Token: e.Admin, Body: map[string]any{"allowed_from": []string{}}}, 200, &src)
		var list struct{ Items []map[string]any }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/sources", Token: e.Admin}, 200, &list)
		if len(list.Items) != 1 || fmt.Sprint(list.Items[0]["allowed_from"]) != "[]" {
			t.Fatalf("listed: %+v", list.Items)
		}
		if st, b := post("d3"); st != 200 {
			t.Fatalf("any address again: %d %s", st, b)
		}
	})
}
