package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// pollWith is a long poll that sends X-Mesh-Envelope: envelope ("" none).
func pollWith(e *ctltest.Env, token string, known int64, wait, envelope string) poll {
	e.T.Helper()
	h := map[string]string{"X-Mesh-Host-Version": "1.0.0", "X-Mesh-Schema": "1", "If-None-Match": fmt.Sprintf(`"%d"`, known)}
	if envelope != "" {
		h[models.HeaderEnvelope] = envelope
	}
	start := time.Now()
	resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=" + wait, Token: token, Header: h})
	return poll{status: resp.StatusCode, etag: resp.Header.Get("ETag"), send: resp.Header.Get("X-Mesh-Send"), body: b, took: time.Since(start)}
}

// openBatch checks a batch envelope as the host does and returns its payload.
func openBatch(t *testing.T, en ctltest.Enrolled, body []byte) []byte {
	t.Helper()
	var shape map[string]json.RawMessage
	if err := json.Unmarshal(body, &shape); err != nil || shape["batch"] == nil || shape["signatures"] != nil {
		t.Fatalf("not a batch envelope: %s", body)
	}
	payload, err := models.OpenEnvelope(body, func(id string, msg, sig []byte) bool {
		for _, k := range en.Keys {
			if k.KeyID == id && ed25519.Verify(ed25519.PublicKey(k.PublicKey), msg, sig) {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("batch envelope: %v", err)
	}
	return payload
}

// TestPoll_EnvelopeFollowsHeader: over real HTTP, a poll that sends
// X-Mesh-Envelope: batch gets the batch envelope, one that does not the
// single-signature one (as a host before batches, or rolled back to one,
// verifies it), for held and parked polls alike; both verify, carry the
// same payload bytes, and every 200 has its send row.
func TestPoll_EnvelopeFollowsHeader(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		m1, m2 := e.Enroll("m1"), e.Enroll("m2")
		batch := pollWith(e, m1.Token, 0, "1s", models.EnvelopeBatch)
		single := pollWith(e, m1.Token, 0, "1s", "")
		if batch.status != 200 || single.status != 200 || batch.etag != single.etag {
			t.Fatalf("polls: %d %s, %d %s", batch.status, batch.etag, single.status, single.etag)
		}
		if d := verify(t, m1, single.body); d.Machine != "m1" {
			t.Fatalf("single-signature envelope for %s", d.Machine)
		}
		var env models.Envelope
		_ = json.Unmarshal(single.body, &env)
		if p := openBatch(t, m1, batch.body); !bytes.Equal(p, env.Payload) {
			t.Fatal("the two envelopes carry different payload bytes")
		}
		if again := pollWith(e, m1.Token, 0, "1s", "single, batch"); !bytes.Equal(again.body, batch.body) {
			t.Fatal("a second batch poll of the generation got other bytes")
		}
		if again := pollWith(e, m1.Token, 0, "1s", "future-format"); !bytes.Equal(again.body, single.body) {
			t.Fatal("a second single poll of the generation got other bytes")
		}

		// m1's host was last seen without the header: composing ahead signs
		// its single envelope too, m2's (never seen without it) is left to
		// its poll. A first poll without the header signed m1's generation 1.
		if n := e.Ctl.Hub.SignedOnPoll(); n != 1 {
			t.Fatalf("%d single-signature envelopes signed on a poll, want 1", n)
		}
		pollWith(e, m2.Token, 0, "1s", models.EnvelopeBatch)
		pollWith(e, m1.Token, 0, "1s", "")

		// Parked polls, woken by a change: each gets its own header's envelope.
		var wg sync.WaitGroup
		var woke1, woke2 poll
		wg.Add(2)
		go func() { defer wg.Done(); woke1 = pollWith(e, m1.Token, 1, "30s", "") }()
		go func() { defer wg.Done(); woke2 = pollWith(e, m2.Token, 1, "30s", models.EnvelopeBatch) }()
		waitFor(t, 5*time.Second, func() bool { return e.Ctl.Hub.Polling("m1") && e.Ctl.Hub.Polling("m2") })
		for _, m := range []string{"m1", "m2"} {
			e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/" + m + "/variables", Token: e.Admin,
				Header: map[string]string{"If-Match": `"1"`}, Body: map[string]any{"variables": map[string]string{"x": "1"}}}, 200, nil)
		}
		wg.Wait()
		if woke1.status != 200 || woke2.status != 200 {
			t.Fatalf("woken polls: %d %d", woke1.status, woke2.status)
		}
		var p models.DeclarationPayload
		if err := json.Unmarshal(openBatch(t, m2, woke2.body), &p); err != nil || p.Machine != "m2" || p.Generation != 2 {
			t.Fatalf("woken batch poll: %+v %v", p, err)
		}
		if d := verify(t, m1, woke1.body); d.Machine != "m1" || d.Generation != 2 {
			t.Fatalf("woken single poll: %+v", d)
		}
		// m1's host polled last without the header: its generation 2 was
		// signed singly when composed ahead, not on the poll path.
		if n := e.Ctl.Hub.SignedOnPoll(); n != 1 {
			t.Fatalf("%d single-signature envelopes signed on a poll, want still 1", n)
		}
		for _, s := range []poll{batch, single, woke1, woke2} {
			if _, err := e.Ctl.Store.Send(context.Background(), s.send); err != nil {
				t.Fatalf("send %q: %v", s.send, err)
			}
		}
	})
}

// TestPoll_EnvelopesAcrossInstances: two instances on one PostgreSQL send
// the same bytes for a (machine, generation), batch and single alike,
// whichever signed the single one first.
func TestPoll_EnvelopesAcrossInstances(t *testing.T) {
	cfg := storetest.Config(t, store.Postgres)
	a := ctltest.StartWith(t, cfg)
	b := ctltest.StartWith(t, cfg)
	en := a.Enroll("m1")
	if err := b.Ctl.Hub.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	batchA := pollWith(a, en.Token, 0, "1s", models.EnvelopeBatch)
	batchB := pollWith(b, en.Token, 0, "1s", models.EnvelopeBatch)
	singleB := pollWith(b, en.Token, 0, "1s", "")
	singleA := pollWith(a, en.Token, 0, "1s", "")
	for _, p := range []poll{batchA, batchB, singleA, singleB} {
		if p.status != 200 {
			t.Fatalf("poll: %d %s", p.status, p.body)
		}
	}
	if !bytes.Equal(batchA.body, batchB.body) || !bytes.Equal(singleA.body, singleB.body) {
		t.Fatal("two instances sent different bytes for one generation")
	}
	openBatch(t, en, batchA.body)
	verify(t, en, singleA.body)
}
