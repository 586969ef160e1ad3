package api_test

import (
	"fmt"
	"strings"
	"testing"

	"gorm.io/gorm"

	"mesh/controller/ctltest"
)

// A machine that changed between a state's page judging it and reading it
// whole was listed under that state with another one in its own view:
// GET /machines?state=current gave an item whose state said behind.
func TestMachines_AStatesPageListsOnlyMachinesInIt(t *testing.T) {
	eachBumpingM1(t, true, func(t *testing.T, e *ctltest.Env, bumpM1Once func(func(*gorm.DB) bool) func() bool) {
		en := e.Enroll("m1")
		send, gen := sendPoll(t, e, en.Token, 0)
		report(e, en.Token, map[string]any{"send": send, "generation": gen, "outcome": "applied"})
		if m := readState(e, "m1"); m.State != "current" {
			t.Fatalf("m1 before: %+v", m)
		}
		fired := bumpM1Once(func(g *gorm.DB) bool {
			return g.Statement.Table == "machines" && strings.Contains(fmt.Sprint(g.Statement.Clauses["WHERE"].Expression), "id IN")
		})
		var l struct {
			Items []machineState `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines?state=current", Token: e.Admin}, 200, &l)
		if !fired() {
			t.Fatal("the page's machines were not read by id: the test no longer changes m1 between the reads")
		}
		for _, m := range l.Items {
			if m.State != "current" {
				t.Errorf("GET /machines?state=current lists a machine whose state says %q (%+v)", m.State, m.StateWords)
			}
		}
	})
}
