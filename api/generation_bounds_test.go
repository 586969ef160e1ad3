package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
)

// TestPoll_AGenerationPastTheLargestIsRefused: a host (a corrupt state
// file, a copy of its token) polled saying it finished generation
// math.MaxInt64, and the poll took it: the machine went into conflict, and
// the resolve that must end any conflict moved its generation past the
// host's, past what the store can hold (PostgreSQL: bigint out of range;
// SQLite: a REAL that no longer scans). Resolve failed at every attempt and
// the machine was never sent anything again. Such a poll is now refused.
func TestPoll_AGenerationPastTheLargestIsRefused(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		for _, g := range []int64{math.MaxInt64, models.MaxGeneration + 1} {
			p := doPoll(e, en.Token, g, "300ms")
			if p.status != 400 || !strings.Contains(string(p.body), "If-None-Match") || !strings.Contains(string(p.body), "the largest a host may be ahead at") {
				t.Fatalf("a poll saying generation %d: %d %s", g, p.status, p.body)
			}
		}
		m, _ := e.Ctl.Store.Machine(context.Background(), "m1")
		if m.Conflict || m.ConflictHostGen != 0 {
			t.Fatalf("a refused poll put the machine in conflict: conflict=%v host generation %d", m.Conflict, m.ConflictHostGen)
		}
		// A report saying such a generation is refused too.
		resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
			Body: map[string]any{"generation": models.MaxGeneration + 1, "outcome": "refused", "error": "x"}})
		if resp.StatusCode != 400 || !strings.Contains(string(b), "generation") {
			t.Fatalf("a report of generation %d: %d %s", models.MaxGeneration+1, resp.StatusCode, b)
		}
	})
}

// TestResolve_AHostAtTheLargestGenerationLeavesRoomForChanges: a host said
// it finished generation MaxInt64-1, and the admin resolved its conflict
// as the dashboard asks: the machine's generation became MaxInt64, and
// from then on every transaction that bumped it overflowed and failed
// whole, so a new build of a module the fleet runs was refused (500) and
// no machine got it (the plan's first tier bumps its canary). Now a host can say at most MaxGeneration, a
// resolve past it leaves the store room, and a conflict stored before
// the bound (past it) is resolved as MaxGeneration.
func TestResolve_AHostAtTheLargestGenerationLeavesRoomForChanges(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		ctx := context.Background()
		bad := e.Enroll("m1")
		e.Enroll("m2")
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "node-tools"}}, 201, nil)
		if resp, b := e.Upload(e.Admin, "node-tools", manifestWithVar, []byte("tree bytes 1"), ""); resp.StatusCode != 201 {
			t.Fatalf("upload: %d %s", resp.StatusCode, b)
		}
		for _, m := range []string{"m1", "m2"} {
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + m + "/variables", Token: e.Admin,
				Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"port": "9000"}}}, 200, nil)
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + m + "/assignments", Token: e.Admin,
				Header: map[string]string{"If-Match": `"2"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools"}}}}, 200, nil)
		}
		if p := doPoll(e, bad.Token, models.MaxGeneration, "300ms"); p.status != 304 {
			t.Fatalf("a poll saying generation %d: %d %s", models.MaxGeneration, p.status, p.body)
		}
		if m, _ := e.Ctl.Store.Machine(ctx, "m1"); !m.Conflict {
			t.Fatalf("a host ahead of the store is not in conflict: %+v", m)
		}
		if resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: e.Admin}); resp.StatusCode != 200 {
			t.Fatalf("resolve: %d %s", resp.StatusCode, b)
		}
		m1, _ := e.Ctl.Store.Machine(ctx, "m1")
		m2, _ := e.Ctl.Store.Machine(ctx, "m2")
		if m1.Conflict || m1.Generation != models.MaxGeneration+1 {
			t.Fatalf("resolved: conflict=%v generation %d, want %d", m1.Conflict, m1.Generation, models.MaxGeneration+1)
		}
		resp, b := e.Upload(e.Admin, "node-tools", manifestWithVar, []byte("tree bytes 2"), "")
		m1b, _ := e.Ctl.Store.Machine(ctx, "m1")
		m2b, _ := e.Ctl.Store.Machine(ctx, "m2")
		if resp.StatusCode != 201 || (m2b.Generation <= m2.Generation && m1b.Generation <= m1.Generation) {
			t.Fatalf("a new build after the resolve: %d %s; m1 generation %d -> %d, m2 %d -> %d",
				resp.StatusCode, b, m1.Generation, m1b.Generation, m2.Generation, m2b.Generation)
		}

		// A conflict stored before polls were bounded, its host's
		// generation at the top of int64.
		if err := e.Ctl.Store.DB().Exec("UPDATE machines SET conflict = ?, conflict_host_generation = ? WHERE name = 'm2'", true, int64(math.MaxInt64)).Error; err != nil {
			t.Fatal(err)
		}
		if resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m2/resolve", Token: e.Admin}); resp.StatusCode != 200 {
			t.Fatalf("resolving a conflict stored past the bound: %d %s", resp.StatusCode, b)
		}
		m2c, err := e.Ctl.Store.Machine(ctx, "m2")
		if err != nil || m2c.Conflict || m2c.Generation != models.MaxGeneration+1 || m2c.ConflictHostGen != models.MaxGeneration {
			t.Fatalf("resolved: %v conflict=%v generation %d host generation %d", err, m2c.Conflict, m2c.Generation, m2c.ConflictHostGen)
		}
		if resp, b := e.Upload(e.Admin, "node-tools", manifestWithVar, []byte("tree bytes 3"), ""); resp.StatusCode != 201 {
			t.Fatalf("a build after it: %d %s", resp.StatusCode, b)
		}
	})
}

// TestPoll_AHostDecodingOnlyALaterSchemaIsHeldBack: a host of a later
// release that decodes only schema 3 (schema 1 dropped after its cycle,
// as the design allows) polled this controller, which composes 1..2: the
// content was labelled "schema": 3, a meaning this controller cannot know.
// It is now held back, and the machine says the host needs a newer
// controller.
func TestPoll_AHostDecodingOnlyALaterSchemaIsHeldBack(t *testing.T) {
	e := ctltest.Start(t, "sqlite")
	en := e.Enroll("m1")
	p := pollSchema(e, en.Token, 0, fmt.Sprint(models.SchemaLatest+1))
	if p.status == 200 {
		if d := verify(t, en, p.body); d.Schema > models.SchemaLatest {
			t.Fatalf("sent generation %d labelled schema %d; this controller composes 1..%d", d.Generation, d.Schema, models.SchemaLatest)
		}
	}
	m, _ := e.Ctl.Store.Machine(context.Background(), "m1")
	if why := m.HeldBack + m.ComposeError; !strings.Contains(why, "needs a newer controller") {
		t.Fatalf("the machine does not say why its host is sent nothing: held back %q, compose error %q", m.HeldBack, m.ComposeError)
	}
}

// TestReport_AHostTimeNotATimeIsRefused: X-Mesh-Host-Time is the host's
// clock as its report leaves; one that is not a time is refused whole,
// nothing stored, rather than read as no clock at all.
func TestReport_AHostTimeNotATimeIsRefused(t *testing.T) {
	e := ctltest.Start(t, "sqlite")
	en := e.Enroll("m1")
	resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
		Header: map[string]string{models.HostTimeHeader: "yesterday"},
		Body:   map[string]any{"generation": 0, "outcome": "refused", "reason": "x"}})
	if resp.StatusCode != 400 || !strings.Contains(string(b), models.HostTimeHeader) {
		t.Fatalf("a report saying the host's clock is %q: %d %s", "yesterday", resp.StatusCode, b)
	}
	resp, b = e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
		Header: map[string]string{models.HostTimeHeader: time.Now().UTC().Format(time.RFC3339Nano)},
		Body:   map[string]any{"generation": 0, "outcome": "refused", "reason": "x"}})
	if resp.StatusCode != 201 {
		t.Fatalf("a report saying the host's clock: %d %s", resp.StatusCode, b)
	}
}

// TestResolve_AHostAtTheLargestGenerationCanApplyWhatTheResolveSent: a
// host said it finished models.MaxGeneration, its machine went into
// conflict, and the admin resolved it: the machine moved to
// MaxGeneration+1 and its host was sent that generation. With the bound
// held on everything a host says, its report of applying it was refused,
// and every poll after, saying the generation the controller itself sent:
// the machine could never be heard from again. A generation the store
// sent is the host's to say.
func TestResolve_AHostAtTheLargestGenerationCanApplyWhatTheResolveSent(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		ctx := context.Background()
		en := e.Enroll("m1")
		if p := doPoll(e, en.Token, models.MaxGeneration, "300ms"); p.status != 304 {
			t.Fatalf("a poll saying generation %d: %d %s", models.MaxGeneration, p.status, p.body)
		}
		if resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: e.Admin}); resp.StatusCode != 200 {
			t.Fatalf("resolve: %d %s", resp.StatusCode, b)
		}
		m, _ := e.Ctl.Store.Machine(ctx, "m1")
		p := doPoll(e, en.Token, models.MaxGeneration, "2s")
		if p.status != 200 {
			t.Fatalf("after the resolve (generation %d), the host's poll: %d %s", m.Generation, p.status, p.body)
		}
		d := verify(t, en, p.body)
		resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
			Body: map[string]any{"send": p.send, "generation": d.Generation, "digest": digestOf(t, p.body), "outcome": "applied"}})
		if resp.StatusCode/100 != 2 {
			t.Errorf("the host applied generation %d, sent by the controller after the resolve; its report: %d %s", d.Generation, resp.StatusCode, b)
		}
		if p := doPoll(e, en.Token, d.Generation, "300ms"); p.status != 304 {
			t.Fatalf("the host's next poll, saying generation %d (the one it was sent): %d %s", d.Generation, p.status, p.body)
		}
	})
}

func digestOf(t *testing.T, body []byte) string {
	var env models.Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	return models.DigestOf(env.Payload)
}
