package api_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"os"
	"strings"
	"testing"

	"mesh/controller/ctltest"
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
		// Unsigned, with headers of 200 KiB: refused, saying so, and
		// recorded; the refusal's row keeps a line of each (it kept them
		// whole, a megabyte a request).
		st, _, raw = post("gitea", gitea(strings.Repeat("d", 200<<10), strings.Repeat("e", 200<<10), body, ""), body)
		if st != 401 || !strings.Contains(raw, "not signed") {
			t.Fatalf("no signature: %d %s", st, raw)
		}
		// Bad signature: refused; its record is the next minute's (one a
		// minute per source and address, counting the rest).
		st, _, raw = post("gitea", gitea("d2", "push", body, sign([]byte("other"))), body)
		if st != 401 || !strings.Contains(raw, "does not match") {
			t.Fatalf("bad signature: %d %s", st, raw)
		}
		// GitHub's headers, the same documented body.
		st, r, raw = post("github", map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "gh-1",
			"X-Hub-Signature-256": "sha256=" + sign(body)}, body)
		if st != 200 || len(r.Builds) != 1 || r.Builds[0].Number != 2 {
			t.Fatalf("github push: %d %s (builds are numbered in merge order)", st, raw)
		}
		// Unknown event; ping.
		st, r, _ = post("gitea", gitea("d4", "issues", body, sign(body)), body)
		if st != 200 || r.Status != "ignored: event issues" {
			t.Fatalf("unknown event: %d %+v", st, r)
		}
		st, r, _ = post("gitea", gitea("d5", "ping", body, sign(body)), body)
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
		if seen["merge"] != 2 || seen["webhook-replay"] != 1 || seen["webhook-refused"] != 1 || seen["webhook"] != 3 {
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
			if st != 200 || len(r.Builds) != 0 || !strings.Contains(r.Status, "already merged") {
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
