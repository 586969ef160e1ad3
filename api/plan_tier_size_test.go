package api_test

import (
	"fmt"
	"math"
	"testing"

	"mesh/controller/ctltest"
)

// TestPlan_ATierOfTheMostMachinesTakesTheRest: a tier of {"machines": N}
// is "the next N machines", and one as large as an int holds, accepted by
// POST /api/v1/modules, means all the rest. Added to the machines before
// it, it wrapped below zero: the tier took none, its machines moved to the
// next tier, and the plan showed them there.
func TestPlan_ATierOfTheMostMachinesTakesTheRest(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		const plain = `{"resources": [{"name": "config", "kind": "file", "path": "/etc/x.conf", "content": "x", "mode": "0644"}]}`
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "node-tools",
			"tiers": []map[string]any{{"machines": 1}, {"machines": math.MaxInt64}, {"machines": 1}}}}, 201, nil)
		for _, n := range []string{"m1", "m2", "m3"} {
			e.Enroll(n)
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + n + "/assignments", Token: e.Admin,
				Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools"}}}}, 200, nil)
		}
		for i := range 2 {
			if resp, b := e.Upload(e.Admin, "node-tools", plain, []byte(fmt.Sprint("tree ", i)), ""); resp.StatusCode != 201 {
				t.Fatalf("upload %d: %d %s", i+1, resp.StatusCode, b)
			}
		}
		var plans struct {
			Items []struct {
				ID int64 `json:"id"`
			} `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/plans", Token: e.Admin}, 200, &plans)
		if len(plans.Items) != 1 {
			t.Fatalf("plans: %+v", plans)
		}
		var plan struct {
			Steps []struct {
				Machine string `json:"machine"`
				Tier    int64  `json:"tier"`
			} `json:"steps"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: fmt.Sprintf("/api/v1/plans/%d", plans.Items[0].ID), Token: e.Admin}, 200, &plan)
		want := map[string]int64{"m1": 0, "m2": 1, "m3": 1}
		for _, st := range plan.Steps {
			if st.Tier != want[st.Machine] {
				t.Errorf("%s is in tier %d (shown %d); the second tier, {\"machines\": %d}, was to take every machine after the first: steps %+v",
					st.Machine, st.Tier, st.Tier+1, int64(math.MaxInt64), plan.Steps)
			}
		}
	})
}
