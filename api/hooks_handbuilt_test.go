package api_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"os"
	"testing"

	"mesh/controller/ctltest"
)

// TestWebhooks_AHandUploadNamingACommitDoesNotRefuseItsMerge: a repository
// holds two modules, app and web. A person uploads a build of app by hand,
// naming commit bffeb74 (the commit it was built from, as the upload form
// asks). The forge's push of bffeb74 (never merged before: no merge, no
// delivery of it) touches both modules. web has never been built from it;
// the push must queue web's build. It was refused whole as a duplicate,
// "already built", because app's hand upload named the commit.
func TestWebhooks_AHandUploadNamingACommitDoesNotRefuseItsMerge(t *testing.T) {
	body, err := os.ReadFile("testdata/gitea-push.json")
	if err != nil {
		t.Fatal(err)
	}
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
			Body: map[string]string{"name": "forge", "kind": "gitea", "repository": "gitea/webhooks", "default_branch": "develop", "secret": hookSecret}}, 201, nil)
		for _, m := range []string{"app", "web"} {
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
				Body: map[string]any{"name": m, "repository": "gitea/webhooks"}}, 201, nil)
		}
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.WriteField("manifest", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/app", "content": "a\n"}]}`)
		_ = mw.WriteField("version", "1.0")
		_ = mw.WriteField("commit", "bffeb74224043ba2feb48d137756c8a9331c449a")
		mw.Close()
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules/app/builds", Token: e.Admin, Body: buf.Bytes(),
			Header: map[string]string{"Content-Type": mw.FormDataContentType()}}, 201, nil)

		resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/forge", Body: body,
			Header: map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": "g-1", "X-Gitea-Signature": sign(body)}})
		var r hookResult
		if resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		web := false
		for _, b := range r.Builds {
			web = web || b.Module == "web"
		}
		if !web {
			t.Fatalf("the first push of bffeb74 (web never built from it; app's build of it uploaded by hand) queued no build of web: %s", out)
		}
	})
}
