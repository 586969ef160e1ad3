package api_test

import (
	"testing"

	"mesh/controller/ctltest"
)

// A variable's value is a string (openapi.yaml: Variables.variables is
// {type: object, additionalProperties: {type: string}}). A null is not
// one: it was taken as "", replacing the stored value with an empty one
// (and a new generation sent to the host) rather than refused.
func TestVariables_NullValueIsRefusedNotEmptied(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.Enroll("m1")
		g := e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/variables", Token: e.Admin}, 200, nil)
		g = e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
			Header: map[string]string{"If-Match": g.Header.Get("ETag")},
			Body:   map[string]any{"variables": map[string]string{"DB_PASSWORD": "s3cret", "port": "8080"}}}, 200, nil)

		r, b := e.Do(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
			Header: map[string]string{"If-Match": g.Header.Get("ETag")},
			Body:   []byte(`{"variables": {"DB_PASSWORD": null, "port": "8080"}}`)})
		if r.StatusCode != 400 {
			t.Errorf("PUT variables with a null value: %d %s, want 400", r.StatusCode, b)
		}
		var got struct{ Variables map[string]string }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/variables", Token: e.Admin}, 200, &got)
		if got.Variables["DB_PASSWORD"] != "s3cret" {
			t.Errorf("DB_PASSWORD is now %q", got.Variables["DB_PASSWORD"])
		}
	})
}
