package api_test

import (
	"context"
	"testing"
	"time"

	"mesh/controller/ctltest"
)

// TestSchema_BackOnAnotherInstance: a host whose schemas went back (its
// trial rolled back) polls instance b, which last saw it with those
// schemas; the upgrade was recorded through instance a. b's memory said
// nothing changed, so nothing was recorded and b sent a declaration
// composed for schemas the poll did not advertise. A declaration is never
// sent in a schema its poll did not advertise: the store is told what the
// host decodes, and the poll is sent the generation composed for it.
func TestSchema_BackOnAnotherInstance(t *testing.T) {
	a, b, en := twoInstances(t)
	p := pollSchema(b, en.Token, 0, "1")
	if p.status != 200 {
		t.Fatalf("first poll: %d %s", p.status, p.body)
	}
	report(b, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied"})
	a.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: a.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
	if resp, body := a.Upload(a.Admin, "web", certModule, []byte("tree"), ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	a.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: a.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "web"}}}}, 200, nil)
	waitFor(t, 5*time.Second, func() bool { return b.Ctl.Hub.View(1).Gen >= 2 && b.Ctl.Hub.Settled() })
	p = pollSchema(b, en.Token, 1, "1")
	d := verify(t, en, p.body)
	if p.status != 200 || d.Generation != 2 || d.Schema != 1 {
		t.Fatalf("held back on b: %d %+v", p.status, d)
	}
	report(b, en.Token, map[string]any{"send": p.send, "generation": 2, "outcome": "applied"})
	// The trial host (1,2) polls a: recorded, generation 3 in schema 2.
	p = pollSchema(a, en.Token, 2, "2,1")
	d = verify(t, en, p.body)
	if p.status != 200 || d.Generation != 3 || d.Schema != 2 {
		t.Fatalf("trial on a: %d %+v", p.status, d)
	}
	waitFor(t, 5*time.Second, func() bool { return b.Ctl.Hub.View(1).Gen >= 3 && b.Ctl.Hub.Settled() })
	// Rolled back: the known-good host decodes 1 only and polls b.
	p = pollSchema(b, en.Token, 2, "1")
	m, _ := a.Ctl.Store.Machine(context.Background(), "m1")
	if p.status != 200 {
		t.Fatalf("the schema-1 poll on b: %d %s (store: schema %q generation %d)", p.status, p.body, m.Schema, m.Generation)
	}
	d = verify(t, en, p.body)
	if d.Schema != 1 || d.Generation <= 3 || m.Schema != "1" {
		t.Fatalf("b sent generation %d in schema %d to a poll advertising schema 1 only (store: schema %q generation %d)",
			d.Generation, d.Schema, m.Schema, m.Generation)
	}
}

// TestConflict_ResolvedOnAnotherInstance: a conflict judged on instance b
// and resolved through instance a stayed in b's memory, and b's polls got
// 304 until its resync. A declaration composed from the store clears it:
// a machine in conflict is never composed.
func TestConflict_ResolvedOnAnotherInstance(t *testing.T) {
	a, b, en := twoInstances(t)
	if p := doPoll(b, en.Token, 0, "1s"); p.status != 200 {
		t.Fatalf("first poll: %d", p.status)
	}
	// The host says it finished generation 5 (a store restored from an
	// older backup): b judges a conflict against the store.
	if p := doPoll(b, en.Token, 5, "1s"); p.status != 304 {
		t.Fatalf("poll in conflict: %d", p.status)
	}
	m, _ := a.Ctl.Store.Machine(context.Background(), "m1")
	t.Logf("store: conflict=%v generation=%d", m.Conflict, m.Generation)
	a.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: a.Admin}, 200, nil)
	m, _ = a.Ctl.Store.Machine(context.Background(), "m1")
	t.Logf("after resolve through a: conflict=%v generation=%d", m.Conflict, m.Generation)
	waitFor(t, 5*time.Second, func() bool { return b.Ctl.Hub.View(m.ID).Gen >= m.Generation && b.Ctl.Hub.Settled() })
	t.Logf("b's memory: %+v", b.Ctl.Hub.View(m.ID))
	onA := doPoll(a, en.Token, 5, "3s")
	onB := doPoll(b, en.Token, 5, "5s")
	t.Logf("poll on a: %d etag %s; poll on b: %d etag %s (took %v)", onA.status, onA.etag, onB.status, onB.etag, onB.took)
	if onA.status != 200 || onB.status != 200 {
		t.Errorf("a answers %d; b answers %d, from its memory of a conflict the store no longer has", onA.status, onB.status)
	}
}

// TestSchema_UpAgainOnAnotherInstance: the store was told "1" through b
// (the trial rolled back); the host decodes 1,2 again and polls a, whose
// memory still said 1,2 from the trial's poll, so nothing was recorded and
// the host was held back until a's resync. An instance that records a
// host's info tells the others to forget theirs.
func TestSchema_UpAgainOnAnotherInstance(t *testing.T) {
	a, b, en := twoInstances(t)
	p := pollSchema(b, en.Token, 0, "1")
	report(b, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied"})
	a.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: a.Admin, Body: map[string]any{"name": "web"}}, 201, nil)
	if resp, body := a.Upload(a.Admin, "web", certModule, []byte("tree"), ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	a.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: a.Admin,
		Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "web"}}}}, 200, nil)
	waitFor(t, 5*time.Second, func() bool { return b.Ctl.Hub.View(1).Gen >= 2 && b.Ctl.Hub.Settled() })
	p = pollSchema(b, en.Token, 1, "1")
	report(b, en.Token, map[string]any{"send": p.send, "generation": 2, "outcome": "applied"})
	p = pollSchema(a, en.Token, 2, "2,1")
	d := verify(t, en, p.body)
	if d.Schema != 2 {
		t.Fatalf("trial on a: %d %+v", p.status, d)
	}
	waitFor(t, 5*time.Second, func() bool { return b.Ctl.Hub.View(1).Gen >= 3 && b.Ctl.Hub.Settled() })
	p = pollSchema(b, en.Token, 2, "1") // rolled back, on b: the fix records "1"
	d = verify(t, en, p.body)
	t.Logf("rollback poll on b: %d gen %d schema %d", p.status, d.Generation, d.Schema)
	report(b, en.Token, map[string]any{"send": p.send, "generation": d.Generation, "outcome": "applied"})
	waitFor(t, 5*time.Second, func() bool { return a.Ctl.Hub.View(1).Gen >= d.Generation && a.Ctl.Hub.Settled() })
	// Upgraded again: the host decodes 1,2 and polls a.
	q := pollSchema(a, en.Token, d.Generation, "2,1")
	m, _ := a.Ctl.Store.Machine(context.Background(), "m1")
	if q.status != 200 || m.Schema != "1,2" {
		t.Fatalf("a host decoding 1,2 again, on a: poll %d; store schema %q held_back %q generation %d", q.status, m.Schema, m.HeldBack, m.Generation)
	}
	if d = verify(t, en, q.body); d.Schema != 2 {
		t.Fatalf("sent generation %d in schema %d, want 2", d.Generation, d.Schema)
	}
}
