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
		db := e.Ctl.Store.DB()
		var armed atomic.Bool
		hook := "test:bump-during-sends"
		if err := db.Callback().Row().Before("gorm:row").Register(hook, func(g *gorm.DB) {
			if g.Statement.Table != "sends" || !armed.CompareAndSwap(true, false) {
				return
			}
			if err := db.Session(&gorm.Session{NewDB: true}).Exec(`UPDATE machines SET generation = generation + 1 WHERE name = 'm1'`).Error; err != nil {
				t.Errorf("bumping m1: %v", err)
			}
		}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = db.Callback().Row().Remove(hook) }()
		armed.Store(true)
		var l struct {
			Items []machineState `json:"items"`
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines", Token: e.Admin}, 200, &l)
		if armed.Load() {
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
		db := e.Ctl.Store.DB()
		var armed atomic.Bool
		hook := "test:bump-during-sends-one"
		if err := db.Callback().Row().Before("gorm:row").Register(hook, func(g *gorm.DB) {
			if g.Statement.Table != "sends" || !armed.CompareAndSwap(true, false) {
				return
			}
			if err := db.Session(&gorm.Session{NewDB: true}).Exec(`UPDATE machines SET generation = generation + 1 WHERE name = 'm1'`).Error; err != nil {
				t.Errorf("bumping m1: %v", err)
			}
		}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = db.Callback().Row().Remove(hook) }()
		armed.Store(true)
		m := readState(e, "m1")
		if armed.Load() {
			t.Fatal("the sends were not read apart: the test no longer changes m1 between the reads")
		}
		if m.StateWords != nil && strings.Contains(m.StateWords.Since, "not sent yet") {
			t.Errorf("GET /machines/m1 shows generation %d saying %q: that generation was sent", m.Generation, m.StateWords.Since)
		}
	})
}
