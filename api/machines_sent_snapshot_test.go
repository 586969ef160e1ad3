package api_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"mesh/controller/ctltest"
	"mesh/store"
)

// The list of machines read its machines, then what was sent of their
// current generation, in two reads: a machine whose generation moved
// between them was shown at its old generation saying "not sent yet" when
// it was sent.
func TestMachines_TheListReadsMachinesAndSendsInOneSnapshot(t *testing.T) {
	eachBumpingM1(t, false, func(t *testing.T, e *ctltest.Env, bumpM1Once func(func(*gorm.DB) bool) func() bool) {
		en := e.Enroll("m1")
		sendPoll(t, e, en.Token, 0) // generation 1 sent, not reported
		if m := readState(e, "m1"); m.State != "behind" || m.StateWords == nil || !strings.Contains(m.StateWords.Since, "sent ") {
			t.Fatalf("m1 before: %+v %+v", m, m.StateWords)
		}
		fired := bumpM1Once(func(g *gorm.DB) bool { return g.Statement.Table == "sends" })
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
	eachBumpingM1(t, false, func(t *testing.T, e *ctltest.Env, bumpM1Once func(func(*gorm.DB) bool) func() bool) {
		en := e.Enroll("m1")
		sendPoll(t, e, en.Token, 0)
		fired := bumpM1Once(func(g *gorm.DB) bool { return g.Statement.Table == "sends" })
		m := readState(e, "m1")
		if !fired() {
			t.Fatal("the sends were not read apart: the test no longer changes m1 between the reads")
		}
		if m.StateWords != nil && strings.Contains(m.StateWords.Since, "not sent yet") {
			t.Errorf("GET /machines/m1 shows generation %d saying %q: that generation was sent", m.Generation, m.StateWords.Since)
		}
	})
}

// eachBumpingM1 runs f on each store's controller with a hook on its reads
// registered as the store opened, before the controller's workers query
// (gorm's callbacks registered or removed on a store in use race its
// queries). arm(match) arms it once: at the first read match says (a
// query through gorm's Query callbacks when query, else a raw one through
// its Row callbacks), it first commits a new generation for m1 from
// another connection: the moment between two reads of one page. fired
// says whether it did (else the test no longer reads where it changes m1).
func eachBumpingM1(t *testing.T, query bool, f func(t *testing.T, e *ctltest.Env, arm func(match func(*gorm.DB) bool) (fired func() bool))) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			var match atomic.Pointer[func(*gorm.DB) bool]
			var db *gorm.DB
			bump := func(g *gorm.DB) {
				m := match.Load()
				if m == nil || !(*m)(g) || !match.CompareAndSwap(m, nil) {
					return
				}
				if err := db.Session(&gorm.Session{NewDB: true}).Exec(`UPDATE machines SET generation = generation + 1 WHERE name = 'm1'`).Error; err != nil {
					t.Errorf("bumping m1: %v", err)
				}
			}
			opened := func(s *store.Store) {
				db = s.DB()
				var err error
				if query {
					err = db.Callback().Query().Before("gorm:query").Register("test:bump-m1-once", bump)
				} else {
					err = db.Callback().Row().Before("gorm:row").Register("test:bump-m1-once", bump)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			e := ctltest.Start(t, d, ctltest.Options{StoreOpened: opened})
			f(t, e, func(m func(*gorm.DB) bool) func() bool {
				match.Store(&m)
				return func() bool { return match.Load() == nil }
			})
		})
	}
}
