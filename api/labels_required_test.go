package api_test

import (
	"fmt"
	"testing"

	"mesh/controller/ctltest"
)

// openapi.yaml's Labels body requires `labels` (as variables and
// assignments require theirs): a body without it is a client's mistake,
// not "remove every label". It was taken as an empty map: every label
// deleted, the machine losing the modules its labels selected, and the
// answer's `labels` null where the spec promises an object.
func TestLabels_BodyWithoutLabelsIsRefusedNotAWipe(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.Enroll("m1")
		resp := e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/labels", Token: e.Admin}, 200, nil)
		resp = e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/labels", Token: e.Admin,
			Header: map[string]string{"If-Match": resp.Header.Get("ETag")},
			Body:   map[string]any{"labels": map[string]string{"env": "prod", "region": "eu"}}}, 200, nil)

		for _, body := range []string{`{}`, `{"labels": null}`} {
			r, b := e.Do(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/labels", Token: e.Admin,
				Header: map[string]string{"If-Match": resp.Header.Get("ETag")}, Body: []byte(body)})
			if r.StatusCode != 400 {
				t.Errorf("PUT labels %s: %d %s, want 400 (labels is required)", body, r.StatusCode, b)
			}
			if r.StatusCode == 200 {
				resp = r
			}
		}
		var got struct{ Labels map[string]string }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/labels", Token: e.Admin}, 200, &got)
		if fmt.Sprint(got.Labels) != "map[env:prod region:eu]" {
			t.Errorf("labels now %v: the malformed request wiped them", got.Labels)
		}
	})
}
