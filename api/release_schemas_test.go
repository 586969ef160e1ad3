package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"mesh/controller/ctltest"
)

// TestReleases_SchemasRequired: a host release upload says which
// declaration schemas its binary decodes; a missing or invalid list is
// 400 naming the field and what was wrong, and nothing is stored. A valid
// list is stored canonical.
func TestReleases_SchemasRequired(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		for _, tc := range []struct{ schemas, detail string }{
			{"", "schemas: required: the declaration schemas the host release decodes, like 1,2"},
			{"1,two", `schemas: "two" is not a schema number (comma-separated positive integers like 1,2)`},
			{"1,1", "schemas: schema 1 is listed twice"},
			{"0", "schemas: schema 0 is outside 1..999"},
			{"5", "schemas: 5 decodes none of the schemas this controller composes (1..2)"},
		} {
			resp, b := e.UploadReleaseSchemas(e.Admin, "1.5.0", tc.schemas, []byte("a mesh-host binary"))
			var prob struct{ Detail string }
			_ = json.Unmarshal(b, &prob)
			if resp.StatusCode != http.StatusBadRequest || prob.Detail != tc.detail {
				t.Fatalf("schemas %q: %d %s; want 400 %q", tc.schemas, resp.StatusCode, b, tc.detail)
			}
		}
		var list struct {
			Items []struct{ Version, Schemas string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases", Token: e.Admin}, 200, &list)
		if len(list.Items) != 0 {
			t.Fatalf("refused uploads stored releases: %+v", list.Items)
		}
		resp, b := e.UploadReleaseSchemas(e.Admin, "1.5.0", " 2, 1", []byte("a mesh-host binary"))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/host-releases", Token: e.Admin}, 200, &list)
		if len(list.Items) != 1 || list.Items[0].Schemas != "1,2" {
			t.Fatalf("releases = %+v; want 1.5.0 decoding 1,2", list.Items)
		}
	})
}
