package web_test

import (
	"context"
	"fmt"
	"mesh/models"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestMachinePage_AssignmentsPastTheFirst500Modules: with more than 500
// modules, the machine's assignment form listed only the 500 newest, and
// saving it, the older module checked, dropped the machine's assignment of
// it (the save read the same page of modules), answering "saved".
func TestMachinePage_AssignmentsPastTheFirst500Modules(t *testing.T) {
	e, op, _ := fixture(t)
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools"}}}}, 200, nil)
	for i := range 500 {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": fmt.Sprintf("extra-%03d", i)}}, 201, nil)
	}
	st, page := op.get("/machines/m1")
	if st != 200 {
		t.Fatalf("machine page: %d", st)
	}
	if !strings.Contains(page, `id="m_node-tools"`) {
		t.Errorf("the assignment form does not list node-tools, which m1 is assigned")
	}
	gen := regexp.MustCompile(`name="generation" value="(\d+)"`).FindStringSubmatch(page)
	form := url.Values{"generation": {gen[1]}}
	for _, m := range regexp.MustCompile(`name="(m_[^"]+)" checked`).FindAllStringSubmatch(page, -1) {
		form.Set(m[1], "on")
	}
	form.Set("m_node-tools", "on") // the person keeps it, as it was
	if st, loc := op.post("/machines/m1/assignments", form, true); st != 303 {
		t.Fatalf("save: %d %.300s", st, loc)
	}
	var as struct{ Assignments []struct{ Module string } }
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/assignments", Token: e.Admin}, 200, &as)
	if len(as.Assignments) != 1 || as.Assignments[0].Module != "node-tools" {
		t.Fatalf("after saving the form with node-tools checked, m1's assignments are %+v, want node-tools", as.Assignments)
	}
}

// TestMachinePage_AStalePushSaysWhatChanged: a push from a page the
// machine moved on from is refused; its message read "Your push are kept
// below; the push stored now are: node-tools".
func TestMachinePage_AStalePushSaysWhatChanged(t *testing.T) {
	e, op, _ := fixture(t)
	op.get("/machines/m1")
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools"}}}}, 200, nil)
	st, body := op.post("/machines/m1/push", url.Values{"generation": {"1"}}, true)
	if st != 409 {
		t.Fatalf("stale push: %d", st)
	}
	i := strings.Index(body, `id="notice"`)
	notice := body[i : i+strings.Index(body[i:], "</div>")]
	if strings.Contains(notice, "Your push are kept below") || strings.Contains(notice, "the push stored now are") ||
		!strings.Contains(notice, "Not pushed: m1 changed since you opened this page") {
		t.Fatalf("the stale push's message is garbled:\n%s", notice)
	}
}

// TestPlansPage_AHaltedPlanPastTheNewest50IsShown: the plans page listed
// the 50 newest plans; a halted plan older than them, waiting for a
// person, vanished from it, and nothing said more plans exist.
func TestPlansPage_AHaltedPlanPastTheNewest50IsShown(t *testing.T) {
	e, op, _ := fixture(t)
	halted := haltedPlan(t, e)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "other"}}, 201, nil)
	e.Enroll("m3")
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m3/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "other"}}}}, 200, nil)
	for i := range 52 {
		if resp, b := e.Upload(e.Admin, "other", fmt.Sprintf(`{"resources": [{"name": "conf", "kind": "file", "path": "/etc/o.conf", "content": "%d\n"}]}`, i), nil, ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %s", b)
		}
	}
	if v, err := e.Ctl.Store.Plan(context.Background(), halted); err != nil || v.State != models.PlanHalted {
		t.Fatalf("plan %d is no longer halted: %v", halted, err)
	}
	st, body := op.get("/plans")
	if st != 200 {
		t.Fatalf("/plans: %d", st)
	}
	n := strings.Count(body, "data-plan=")
	if !strings.Contains(body, fmt.Sprintf(`data-plan="%d"`, halted)) || !strings.Contains(body, `id="plans-shown"`) {
		t.Fatalf("halted plan %d is not on the plans page, and the page (%d plans listed) does not say older plans exist", halted, n)
	}
}
