package api_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"mesh/controller/ctltest"
)

// The list of machines read its machines, then what was sent of their
// current generation, in two reads: a machine whose generation moved
// between them was shown at its old generation saying "not sent yet" when
// it was sent.
func TestMachines_TheListReadsMachinesAndSendsInOneSnapshot(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		sendPoll(t, e, en.Token, 0) // generation 1 sent, not reported
		if m := readState(e, "m1"); m.State != "behind" || m.StateWords == nil || !strings.Contains(m.StateWords.Since, "sent ") {
			t.Fatalf("m1 before: %+v %+v", m, m.StateWords)
		}
		fired := bumpM1Once(t, e, false, func(g *gorm.DB) bool { return g.Statement.Table == "sends" })
		var l struct {
			Items []machineState `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: e.Admin}, 200, &l)
		if !fired() {
			t.Fatal("the sends were not read apart: the test no longer changes m1 between the reads")
		}
		for _, m := range l.Items {
			if m.StateWords != nil && strings.Contains(m.StateWords.Since, "not sent yet") {
				t.Errorf("GET /machines shows m1 at generation %d saying %q: that generation was sent", m.Generation, m.StateWords.Since)
			}
		}
	})
}

// The same two reads for one machine: GET /machines/{name}.
func TestMachines_OneMachineReadsItselfAndItsSendsInOneSnapshot(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		sendPoll(t, e, en.Token, 0)
		fired := bumpM1Once(t, e, false, func(g *gorm.DB) bool { return g.Statement.Table == "sends" })
		m := readState(e, "m1")
		if !fired() {
			t.Fatal("the sends were not read apart: the test no longer changes m1 between the reads")
		}
		if m.StateWords != nil && strings.Contains(m.StateWords.Since, "not sent yet") {
			t.Errorf("GET /machines/m1 shows generation %d saying %q: that generation was sent", m.Generation, m.StateWords.Since)
		}
	})
}

// bumpM1Once arms a hook that, at the first read match says (a query
// through gorm's Query callbacks, else a raw one through its Row
// callbacks), first commits a new generation for m1 from another
// connection: the moment between two reads of one page. It says whether
// the hook fired (else the test no longer reads where it changes m1).
func bumpM1Once(t *testing.T, e *ctltest.Env, query bool, match func(*gorm.DB) bool) (fired func() bool) {
	t.Helper()
	db := e.Ctl.Store.DB()
	var armed atomic.Bool
	armed.Store(true)
	bump := func(g *gorm.DB) {
		if !match(g) || !armed.CompareAndSwap(true, false) {
			return
		}
		if err := db.Session(&gorm.Session{NewDB: true}).Exec(`UPDATE machines SET generation = generation + 1 WHERE name = 'm1'`).Error; err != nil {
			t.Errorf("bumping m1: %v", err)
		}
	}
	const hook = "test:bump-m1-once"
	var err error
	if query {
		err = db.Callback().Query().Before("gorm:query").Register(hook, bump)
		t.Cleanup(func() { _ = db.Callback().Query().Remove(hook) })
	} else {
		err = db.Callback().Row().Before("gorm:row").Register(hook, bump)
		t.Cleanup(func() { _ = db.Callback().Row().Remove(hook) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return func() bool { return !armed.Load() }
}
