package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestWebhooks_AMergedCommitReplayedAfterItsSourceIsDeleted: a forge and
// its mirror are two sources of one repository. Commit bffeb74 is merged
// through the forge (build 1); the mirror's delivery of it is a duplicate;
// a later commit is build 2. The forge's source is deleted (its deliveries
// and merges go with it). The mirror's captured, signed delivery of the
// old commit posted again under a new delivery id was then a merge, and
// queued the old code as build 3, newer than build 2. A commit a module
// was built from is a duplicate now.
func TestWebhooks_AMergedCommitReplayedAfterItsSourceIsDeleted(t *testing.T) {
	body, err := os.ReadFile("testdata/gitea-push.json")
	if err != nil {
		t.Fatal(err)
	}
	each(t, func(t *testing.T, e *ctltest.Env) {
		for _, src := range []map[string]string{
			{"name": "forge", "kind": "gitea", "repository": "gitea/webhooks", "default_branch": "develop", "secret": hookSecret},
			{"name": "mirror", "kind": "github", "repository": "gitea/webhooks", "default_branch": "develop", "secret": hookSecret},
		} {
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin, Body: src}, 201, nil)
		}
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
			Body: map[string]any{"name": "webhooks", "repository": "gitea/webhooks"}}, 201, nil)
		post := func(source string, h map[string]string, b []byte) hookResult {
			resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/" + source, Body: b, Header: h})
			var r hookResult
			if resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil {
				t.Fatalf("%s: %d %s", source, resp.StatusCode, out)
			}
			return r
		}
		gitea := func(delivery string, b []byte) map[string]string {
			return map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": delivery, "X-Gitea-Signature": sign(b)}
		}
		github := func(delivery string, b []byte) map[string]string {
			return map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + sign(b)}
		}
		if r := post("forge", gitea("g-1", body), body); len(r.Builds) != 1 || r.Builds[0].Number != 1 {
			t.Fatalf("first push: %+v", r)
		}
		if r := post("mirror", github("gh-1", body), body); !strings.HasPrefix(r.Status, "duplicate") {
			t.Fatalf("the mirror's delivery: %+v", r)
		}
		second := bytes.Replace(body, []byte("bffeb74224043ba2feb48d137756c8a9331c449a"), []byte("5ec0d00224043ba2feb48d137756c8a9331c449a"), 1)
		if r := post("forge", gitea("g-2", second), second); len(r.Builds) != 1 || r.Builds[0].Number != 2 {
			t.Fatalf("second push: %+v", r)
		}
		e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/sources/forge", Token: e.Admin}, 204, nil)
		// The mirror's delivery of the first commit, replayed.
		if r := post("mirror", github("gh-1-again", body), body); !strings.HasPrefix(r.Status, "duplicate") || len(r.Builds) != 0 {
			t.Fatalf("a replay of commit bffeb74, merged as build 1 before build 2, is acted on: %+v", r)
		}
	})
}

// TestWebhooks_ASignedDeliveryRefusedIsOnTheRecord: a signed push whose
// commit is not a commit id is refused (400); neither the delivery nor its
// refusal was anywhere on the record.
func TestWebhooks_ASignedDeliveryRefusedIsOnTheRecord(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
			Body: map[string]string{"name": "app", "kind": "gitea", "repository": "o/app", "default_branch": "main", "secret": hookSecret}}, 201, nil)
		b, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "after": "not-a-commit", "repository": map[string]any{"full_name": "o/app"}})
		resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: b,
			Header: map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": "delivery-42", "X-Gitea-Signature": sign(b)}})
		if resp.StatusCode != 400 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		var audit struct {
			Items []struct{ Action, Target, Detail string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=source/app", Token: e.Admin}, 200, &audit)
		for _, ev := range audit.Items {
			if strings.Contains(ev.Detail, "delivery-42") {
				return
			}
		}
		t.Fatalf("refused delivery delivery-42 (400: %s) is not on the record: %+v", strings.TrimSpace(string(out)), audit.Items)
	})
}
