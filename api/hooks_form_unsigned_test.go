package api_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestWebhooks_AJSONDeliveryPostedAsAFormIsNotReadAgain: the content type
// is an unsigned header. A source whose forge sends JSON (GitHub with
// "application/json"; GitHub's JSON leaves '&' and '=' as they are) signs
// the JSON bytes. Someone who may push only to a feature branch writes a
// commit message holding "&payload=<a push to main, URL-encoded>&z=";
// the forge delivers and signs that feature push, which the controller
// rightly ignores. Posting the same signed bytes again under a new
// delivery id with Content-Type: application/x-www-form-urlencoded, the
// controller read them as a form, took the payload field the message
// carried — a push to main of the feature's commit, written by the
// outsider — and merged and built it. Signed bytes are read as what they
// are, whatever the header says (a form body starts "payload=", a JSON one
// "{").
func TestWebhooks_AJSONDeliveryPostedAsAFormIsNotReadAgain(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet"})
		a, f := strings.Repeat("a", 40), strings.Repeat("f", 40)
		forged := string(pushOf(a, f, 0, "web/evil.go")) // ref: refs/heads/main
		msg := "fix typo&payload=" + url.QueryEscape(forged) + "&z="
		genuine := map[string]any{"ref": "refs/heads/feature", "before": a, "after": f,
			"repository": map[string]any{"full_name": "octo-org/fleet"}, "pusher": map[string]any{"name": "dev"},
			"commits": []map[string]any{{"id": f, "message": msg, "added": []string{}, "removed": []string{}, "modified": []string{"web/evil.go"}}}}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // as GitHub writes it
		if err := enc.Encode(genuine); err != nil {
			t.Fatal(err)
		}
		body := bytes.TrimSpace(buf.Bytes())
		post := func(delivery, contentType string) (int, hookResult, string) {
			resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/src", Body: body, Header: map[string]string{
				"Content-Type": contentType, "X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + sign(body)}})
			var r hookResult
			_ = json.Unmarshal(out, &r)
			return resp.StatusCode, r, string(out)
		}
		// The forge's delivery: a push to a feature branch, not built.
		if st, r, raw := post("d-forge", "application/json"); st != 200 || r.Merge != nil || len(r.Builds) != 0 {
			t.Fatalf("the feature branch's push: %d %s", st, raw)
		}
		// The same signed bytes, another id, the header a form's.
		st, r, raw := post("d-outsider", "application/x-www-form-urlencoded")
		if r.Merge != nil || len(r.Builds) != 0 {
			t.Fatalf("the forge's signed JSON, posted again as a form, was read as the push to main its commit message carried: %d %s", st, strings.TrimSpace(raw))
		}
	})
}
