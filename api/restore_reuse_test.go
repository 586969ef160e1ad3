package api_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/store"
	"mesh/store/storetest"
)

// restoredBehindTheHost takes a backup at generation 3, moves the store
// on to generation 4 (port=2), which the host applies, and restores the
// store from the backup (as `mesh-controller backup --help` says). It
// returns the restored controller, the send of the lost timeline's
// generation 4, a change of m1's port on the restored store, and a poll as
// the host at a generation naming the send it finished with.
func restoredBehindTheHost(t *testing.T) (r *ctltest.Env, applied poll, setPort func(gen, port string), finished func(gen, send, wait string) (poll, string)) {
	t.Helper()
	ctx := context.Background()
	sc := storetest.Config(t, store.SQLite)
	e := ctltest.StartWith(t, sc)
	en := e.Enroll("m1")
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "node-tools"}}, 201, nil)
	if resp, b := e.Upload(e.Admin, "node-tools", manifestWithVar, []byte("tree bytes"), ""); resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	setPortOn := func(e *ctltest.Env, gen, port string) {
		e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
			Header: map[string]string{"If-Match": `"` + gen + `"`}, Body: map[string]any{"variables": map[string]string{"port": port}}}, 200, nil)
	}
	setPortOn(e, "1", "1") // generation 2
	e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/assignments", Token: e.Admin,
		Header: map[string]string{"If-Match": `"2"`}, Body: map[string]any{"assignments": []map[string]any{{"module": "node-tools"}}}}, 200, nil)
	if p := doPoll(e, en.Token, 0, "5s"); p.status != 200 || p.etag != `"3"` {
		t.Fatalf("poll: %d %s", p.status, p.etag)
	}
	backup := filepath.Join(t.TempDir(), "backup.db")
	if err := e.Ctl.Store.Backup(ctx, backup); err != nil {
		t.Fatal(err)
	}
	setPortOn(e, "3", "2") // generation 4, applied by the host
	applied = doPoll(e, en.Token, 3, "5s")
	if applied.status != 200 || applied.etag != `"4"` || !strings.Contains(*verify(t, en, applied.body).Resources[0].Content, "port=2") {
		t.Fatalf("poll of generation 4: %d %s", applied.status, applied.etag)
	}
	admin := e.Admin
	e.Stop()

	db := filepath.Join(sc.DataDir, "mesh.db")
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	r = ctltest.StartWith(t, sc)
	r.Admin = admin
	setPort = func(gen, port string) { setPortOn(r, gen, port) }
	// finished's second result is the content of a declaration sent.
	finished = func(gen, send, wait string) (poll, string) {
		resp, b := r.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=" + wait, Token: en.Token,
			Header: map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1", "If-None-Match": `"` + gen + `"`, "X-Mesh-Finished-Send": send}})
		p := poll{status: resp.StatusCode, etag: resp.Header.Get("ETag"), send: resp.Header.Get("X-Mesh-Send"), body: b}
		if p.status != 200 {
			return p, ""
		}
		return p, *verify(t, en, b).Resources[0].Content
	}
	return r, applied, setPort, finished
}

// conflictOnRecord fails unless m1 is in conflict with one conflict row
// naming the host's finished send as one the store never made.
func conflictOnRecord(t *testing.T, r *ctltest.Env, send, why string) {
	t.Helper()
	var m struct {
		Generation int64  `json:"generation"`
		State      string `json:"state"`
	}
	r.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: r.Admin}, 200, &m)
	if m.State != "conflict" {
		t.Fatalf("%s: the machine is %q at generation %d; the host keeps port=2 and nothing says so", why, m.State, m.Generation)
	}
	var audit struct {
		Items []struct{ Action, Target, Detail string }
	}
	r.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=machine/m1&action=conflict", Token: r.Admin}, 200, &audit)
	if len(audit.Items) != 1 || !strings.Contains(audit.Items[0].Detail, "by send "+send+", which this store does not hold: made on a timeline the store lost") {
		t.Fatalf("the conflict's record: %+v", audit.Items)
	}
}

// TestRestore_AGenerationReusedIsAConflict: after restoredBehindTheHost,
// and before the host's next poll reaches it, an operator makes one change
// (port=3): the restored store's generation 4 is another declaration than
// the generation 4 the host applied. The host polls saying it finished 4
// by a send the restored store never made (X-Mesh-Finished-Send): the
// machine is in conflict, on the record, and a resolve sends it the
// store's content — not a 304 that left it on the lost timeline's content
// for good while the store believed it current. A host at 4 by a send the
// store did make is not.
func TestRestore_AGenerationReusedIsAConflict(t *testing.T) {
	r, applied, setPort, finished := restoredBehindTheHost(t)
	setPort("3", "3") // the restored store's generation 4: port=3
	if p, _ := finished("4", applied.send, "0s"); p.status != 304 {
		t.Fatalf("poll at generation 4 of the lost timeline: %d %s", p.status, p.body)
	}
	conflictOnRecord(t, r, applied.send, "the host applied generation 4 with port=2, the restored store's generation 4 is port=3")
	r.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: r.Admin}, 200, nil)
	p, content := finished("4", applied.send, "5s")
	if p.status != 200 || p.etag != `"5"` || !strings.Contains(content, "port=3") {
		t.Fatalf("after the resolve: %d %s", p.status, p.etag)
	}
	// The host applied 5 by that send: at the store's generation by a send
	// it made, it is current, however often it polls.
	for range 2 {
		if q, _ := finished("5", p.send, "0s"); q.status != 304 {
			t.Fatalf("poll at generation 5: %d %s", q.status, q.body)
		}
	}
	var m struct{ State string }
	r.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: r.Admin}, 200, &m)
	if m.State == "conflict" {
		t.Fatalf("a host at the store's generation by the store's own send is in conflict")
	}
}

// TestRestore_AStorePastTheHostIsAConflict: after restoredBehindTheHost the
// restored store moves on twice (port=3, port=4) before the host polls, so
// its generation, 5, is past the host's 4. Its generation 5 is composed
// from the backup's timeline: sent, the host would apply it in full and
// take away whatever the lost timeline had added. The host finished 4 by a
// send this store never made, so the machine is in conflict and waits for
// an operator, as when the store reused the host's generation.
func TestRestore_AStorePastTheHostIsAConflict(t *testing.T) {
	r, applied, setPort, finished := restoredBehindTheHost(t)
	setPort("3", "3")
	setPort("4", "4") // generation 5
	if p, _ := finished("4", applied.send, "0s"); p.status != 304 {
		t.Fatalf("a host on the lost timeline was sent generation %s of the backup's (%d)", p.etag, p.status)
	}
	conflictOnRecord(t, r, applied.send, "the host applied generation 4 of a timeline the restored store does not have, the store is at 5")
	r.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/resolve", Token: r.Admin}, 200, nil)
	p, content := finished("4", applied.send, "5s")
	if p.status != 200 || p.etag != `"6"` || !strings.Contains(content, "port=4") {
		t.Fatalf("after the resolve: %d %s", p.status, p.etag)
	}
}
