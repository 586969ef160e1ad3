package web_test

import (
	"net/url"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// A dashboard form's field that is not UTF-8 (or holds a NUL) is refused,
// nothing changed, when it is in the body; the handlers read their fields
// with FormValue, which takes the URL's query too, and the same field sent
// as ?r_node-tools=%ff was stored (read back as U+FFFD).
func TestForm_FieldsInTheQueryAreRefused(t *testing.T) {
	e, op, _ := fixture(t)
	op.get("/machines/m1")
	st, body := op.post("/machines/m1/assignments", url.Values{"generation": {"1"}, "m_node-tools": {"on"}, "r_node-tools": {"\xff\xfe"}}, true)
	if st != 400 || !strings.Contains(body, "not valid UTF-8") {
		t.Fatalf("in the body: %d, want 400", st)
	}
	for _, q := range []string{"r_node-tools=%ff%fe", "r_node-tools=a%00b", "r_node-tools=fine"} {
		st, body = op.post("/machines/m1/assignments?"+q, url.Values{"generation": {"1"}, "m_node-tools": {"on"}}, true)
		var as struct {
			Assignments []struct{ Module, Reason string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
		if st != 400 || len(as.Assignments) != 0 {
			t.Fatalf("a field in the query (%s): %d %.60s, want 400 and nothing stored; stored %+q", q, st, body, as.Assignments)
		}
	}
}
