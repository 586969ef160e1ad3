package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestResolve_AHostAtTheLargestGenerationLeavesRoomForChanges: a host (a
// corrupt state file, a copy of its token) said it finished generation
// math.MaxInt64, and the resolve that must end its conflict moved the
// machine past it: past what the store can hold (PostgreSQL: bigint out of
// range; SQLite: a REAL that no longer scans), so the resolve failed (500)
// at every attempt; just under it, the resolve left the machine at the
// top, and every later change touching it (a new build for the whole
// fleet) failed whole. Such a host's conflict is now cleared without
// moving past it (it is in conflict again while it says so, and served
// once reset), its name can be enrolled again, and the fleet's changes
// go on; a host at the furthest a store moves a machine is resolved past,
// with room to count.
func TestResolve_AHostAtTheLargestGenerationLeavesRoomForChanges(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		ctx := context.Background()
		bad := e.Enroll("m1")
		far := e.Enroll("m2")
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
		for _, h := range []struct {
			token string
			gen   int64
		}{{bad.Token, math.MaxInt64}, {far.Token, models.MaxGeneration}} {
			if p := doPoll(e, h.token, h.gen, "300ms"); p.status != 304 {
				t.Fatalf("a poll saying generation %d: %d %s", h.gen, p.status, p.body)
			}
		}
		for _, name := range []string{"m1", "m2"} {
			if m, _ := e.Ctl.Store.Machine(ctx, name); !m.Conflict {
				t.Fatalf("a host ahead of the store is not in conflict: %+v", m)
			}
		}
		before, _ := e.Ctl.Store.Machine(ctx, "m1")
		for _, name := range []string{"m1", "m2"} {
			if resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/machines/" + name + "/resolve", Token: e.Admin}); resp.StatusCode != 200 {
				t.Fatalf("resolve %s: %d %s", name, resp.StatusCode, b)
			}
		}
		m1, _ := e.Ctl.Store.Machine(ctx, "m1")
		m2, _ := e.Ctl.Store.Machine(ctx, "m2")
		if m1.Conflict || m1.Generation != before.Generation+1 || m2.Conflict || m2.Generation != models.MaxGeneration+1 {
			t.Fatalf("m1 conflict=%v generation %d (want cleared at %d); m2 conflict=%v generation %d, want %d",
				m1.Conflict, m1.Generation, before.Generation+1, m2.Conflict, m2.Generation, models.MaxGeneration+1)
		}
		for i := 2; i <= 3; i++ {
			resp, b := e.Upload(e.Admin, "node-tools", manifestWithVar, []byte(fmt.Sprint("tree bytes ", i)), "")
			m1b, _ := e.Ctl.Store.Machine(ctx, "m1")
			m2b, _ := e.Ctl.Store.Machine(ctx, "m2")
			if resp.StatusCode != 201 || (m2b.Generation <= m2.Generation && m1b.Generation <= m1.Generation) {
				t.Fatalf("build %d: %d %s; m1 generation %d -> %d, m2 %d -> %d", i, resp.StatusCode, b, m1.Generation, m1b.Generation, m2.Generation, m2b.Generation)
			}
			m1, m2 = m1b, m2b
		}

		// m1's host, still saying the top of int64, is in conflict again;
		// reset (its state file removed), it is served once cleared.
		if p := doPoll(e, bad.Token, math.MaxInt64, "300ms"); p.status != 304 {
			t.Fatalf("the host still at the top: %d %s", p.status, p.body)
		}
		if m, _ := e.Ctl.Store.Machine(ctx, "m1"); !m.Conflict {
			t.Fatalf("a host still past the store is not in conflict again: %+v", m)
		}
		if resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: e.Admin}); resp.StatusCode != 200 {
			t.Fatalf("resolve m1 again: %d %s", resp.StatusCode, b)
		}
		if p := doPoll(e, bad.Token, 0, "2s"); p.status != 200 {
			t.Fatalf("the host reset, its poll: %d %s", p.status, p.body)
		}
		// Deleted and enrolled again under its name, it starts with room.
		e.JSON(ctltest.Request{Method: "DELETE", Path: "/api/v1/machines/m1", Token: e.Admin}, 204, nil)
		resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{
			"join_token": e.JoinToken(), "name": "m1", "os": "linux", "arch": "amd64", "host_version": "1.0.0", "schema": "1"}})
		if resp.StatusCode != 201 {
			t.Fatalf("enrolled again under its name: %d %s", resp.StatusCode, b)
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

// TestRestore_AHostPastTheBoundIsPutInConflict: a host said it finished
// generation 2^53, was resolved, and applied what the resolve sent; the
// store was then restored from a backup made before, at a low generation.
// A host ahead of its restored store is put in conflict for an admin to
// resolve; with hosts held to 2^53-1 unless the store had sent more, its
// polls were refused (400) at every attempt, the machine was never in
// conflict and never sent anything again.
func TestRestore_AHostPastTheBoundIsPutInConflict(t *testing.T) {
	ctx := context.Background()
	const past = int64(1) << 53 // past the bound hosts were once held to
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	en := e.Enroll("m1")
	backup := filepath.Join(t.TempDir(), "backup.db")
	if err := e.Ctl.Store.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	if p := doPoll(e, en.Token, past, "300ms"); p.status != 304 {
		t.Fatalf("a poll saying generation %d: %d %s", past, p.status, p.body)
	}
	if resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: e.Admin}); resp.StatusCode != 200 {
		t.Fatalf("resolve: %d %s", resp.StatusCode, b)
	}
	p := doPoll(e, en.Token, past, "2s")
	if p.status != 200 {
		t.Fatalf("after the resolve: %d %s", p.status, p.body)
	}
	d := verify(t, en, p.body)
	if resp, b := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
		Body: map[string]any{"send": p.send, "generation": d.Generation, "digest": digestOf(t, p.body), "outcome": "applied"}}); resp.StatusCode/100 != 2 {
		t.Fatalf("report: %d %s", resp.StatusCode, b)
	}
	admin := e.Admin
	e.Stop()
	if _, err := store.Restore(ctx, sc.DataDir, backup, time.Now()); err != nil {
		t.Fatal(err)
	}
	r := ctltest.StartWith(t, sc)
	r.Admin = admin
	hostPoll := func() poll {
		resp, b := r.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=300ms", Token: en.Token,
			Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1",
				"If-None-Match": `"` + fmt.Sprint(d.Generation) + `"`, models.HeaderFinishedSend: p.send}})
		return poll{status: resp.StatusCode, send: resp.Header.Get("X-Mesh-Send"), body: b}
	}
	q := hostPoll()
	m, _ := r.Ctl.Store.Machine(ctx, "m1")
	if q.status == 400 || !m.Conflict {
		t.Fatalf("the host, at generation %d the store sent before the restore, polls the restored store (generation %d): %d %s; machine in conflict: %v",
			d.Generation, m.Generation, q.status, q.body, m.Conflict)
	}
	if resp, b := r.Do(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: r.Admin}); resp.StatusCode != 200 {
		t.Fatalf("resolve after the restore: %d %s", resp.StatusCode, b)
	}
	if q := hostPoll(); q.status != 200 {
		t.Fatalf("after the resolve, the host's poll: %d %s", q.status, q.body)
	}
}
