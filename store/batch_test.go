package store_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// countingSigner counts its signatures.
type countingSigner struct {
	signer
	n atomic.Int64
}

func (c *countingSigner) Sign(p []byte) []byte { c.n.Add(1); return c.signer.Sign(p) }

func trustedBy(sg signer) func(string, []byte, []byte) bool {
	return func(id string, msg, sig []byte) bool {
		return id == sg.KeyID() && ed25519.Verify(sg.priv.Public().(ed25519.PublicKey), msg, sig)
	}
}

// TestCompose_OneSignaturePerBatch: a chunk composed together is signed
// once; each declaration stores its batch envelope (its payload, its
// inclusion proof and the root's signature) and no single-signature
// envelope until one is needed. Another instance composing the same
// generations reads the stored bytes.
func TestCompose_OneSignaturePerBatch(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := fixtures(t, s, 5)
		sg := &countingSigner{signer: newSigner()}
		got, fails, err := s.Compose(ctx, ids, "ctl-a", sg)
		if err != nil || len(fails) > 0 || len(got) != 5 {
			t.Fatalf("compose: %v %v, %d composed", err, fails, len(got))
		}
		if n := sg.n.Load(); n != 1 {
			t.Fatalf("%d signatures for a batch of 5, want 1", n)
		}
		indexes := map[int64]bool{}
		var root []byte
		for _, id := range ids {
			c := got[id]
			if len(c.Envelope) != 0 {
				t.Fatalf("machine %d: a single-signature envelope signed ahead of need", id)
			}
			payload, err := models.OpenEnvelope(c.Batch, trustedBy(sg.signer))
			if err != nil || models.DigestOf(payload) != c.Digest {
				t.Fatalf("machine %d: batch envelope %v, digest %s of %s", id, err, models.DigestOf(payload), c.Digest)
			}
			var be models.BatchEnvelope
			decode(t, c.Batch, &be)
			if be.Batch.Size != 5 || indexes[be.Batch.Index] || (root != nil && !bytes.Equal(root, be.Batch.Root)) {
				t.Fatalf("machine %d: proof %+v in a batch of 5", id, be.Batch)
			}
			indexes[be.Batch.Index], root = true, be.Batch.Root
			d, err := s.Declaration(ctx, id, c.Generation)
			if err != nil || !bytes.Equal(d.Batch, c.Batch) || len(d.Envelope) != 0 {
				t.Fatalf("machine %d: stored %v, batch %q envelope %q", id, err, d.Batch, d.Envelope)
			}
		}
		other, fails, err := s.Compose(ctx, ids, "ctl-b", newSigner())
		if err != nil || len(fails) > 0 {
			t.Fatalf("compose again: %v %v", err, fails)
		}
		for _, id := range ids {
			if !bytes.Equal(other[id].Batch, got[id].Batch) {
				t.Fatalf("machine %d: another instance holds other batch bytes", id)
			}
		}
	})
}

// TestSingleEnvelope_SignedOnceStored: the single-signature envelope is
// signed on first need and stored; instances asking at once (each with
// its own key, so their own signatures would differ) all return the one
// stored, which verifies and carries the batch envelope's payload.
func TestSingleEnvelope_SignedOnceStored(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl-a", newSigner())
		if err != nil || fails[m.ID] != nil {
			t.Fatalf("compose: %v %v", err, fails[m.ID])
		}
		comp := got[m.ID]
		signers := make([]signer, 6)
		out := make([]*models.Composed, len(signers))
		var wg sync.WaitGroup
		for i := range signers {
			signers[i] = newSigner()
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := s.SingleEnvelope(ctx, comp, signers[i])
				if err != nil {
					t.Errorf("instance %d: %v", i, err)
					return
				}
				out[i] = c
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		d, err := s.Declaration(ctx, m.ID, comp.Generation)
		if err != nil {
			t.Fatal(err)
		}
		winner := -1
		for i, c := range out {
			if !bytes.Equal(c.Envelope, d.Envelope) || !bytes.Equal(c.Batch, comp.Batch) {
				t.Fatalf("instance %d returned an envelope that is not the stored one", i)
			}
			if _, err := models.OpenEnvelope(c.Envelope, trustedBy(signers[i])); err == nil {
				winner = i
			}
		}
		if winner < 0 {
			t.Fatal("the stored envelope is signed by none of the instances")
		}
		if len(comp.Envelope) != 0 {
			t.Fatal("SingleEnvelope changed the composed declaration it was given")
		}
		single, err := models.OpenEnvelope(d.Envelope, trustedBy(signers[winner]))
		if err != nil {
			t.Fatal(err)
		}
		batched, _ := models.PayloadOf(comp.Batch)
		if !bytes.Equal(single, batched) {
			t.Fatal("the single-signature envelope carries other payload bytes than the batch one")
		}
		// Composing again reads both envelopes back.
		again, _, err := s.Compose(ctx, []int64{m.ID}, "ctl-c", newSigner())
		if err != nil || !bytes.Equal(again[m.ID].Envelope, d.Envelope) || !bytes.Equal(again[m.ID].Batch, comp.Batch) {
			t.Fatalf("composed again: %v, other bytes", err)
		}
	})
}

// TestComposeFor_SingleAhead: the machines named as having hosts that do
// not verify batches get their single-signature envelope signed while
// composing (stored, verifying, carrying the batch's payload); the others
// do not.
func TestComposeFor_SingleAhead(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "m1"), fixture(t, s, "m2")
		sg := newSigner()
		got, fails, err := s.ComposeFor(ctx, []int64{a.ID, b.ID}, "ctl-a", sg, map[int64]bool{a.ID: true})
		if err != nil || len(fails) > 0 {
			t.Fatalf("compose: %v %v", err, fails)
		}
		single, err := models.OpenEnvelope(got[a.ID].Envelope, trustedBy(sg))
		batched, _ := models.PayloadOf(got[a.ID].Batch)
		if err != nil || !bytes.Equal(single, batched) {
			t.Fatalf("m1's single-signature envelope: %v", err)
		}
		if len(got[b.ID].Envelope) != 0 {
			t.Fatal("m2's single-signature envelope signed ahead of need")
		}
		d, err := s.Declaration(ctx, a.ID, got[a.ID].Generation)
		if err != nil || !bytes.Equal(d.Envelope, got[a.ID].Envelope) {
			t.Fatalf("m1's stored envelope: %v", err)
		}
		// SingleEnvelope finds it stored and signs nothing.
		c, err := s.SingleEnvelope(ctx, got[a.ID], newSigner())
		if err != nil || !bytes.Equal(c.Envelope, d.Envelope) {
			t.Fatalf("single envelope: %v", err)
		}
	})
}

// TestCompose_OverTheHostsCapIsAFailure: a declaration whose envelope
// would be over the size a host takes (many modules of large manifests)
// is a compose failure, said once, not a send every host refuses unread.
func TestCompose_OverTheHostsCapIsAFailure(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		big := strings.Repeat("x", models.MaxPayload)
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "big", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateBuild(ctx, "test", "big", &models.Build{Manifest: `{"resources": [{"name": "data", "kind": "file", "path": "/etc/big", "content": "` + big + `"}]}`}, nil); err != nil {
			t.Fatal(err)
		}
		g := m.Generation
		m, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{{Module: "mod"}, {Module: "big"}})
		if err != nil {
			t.Fatal(err)
		}
		got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl-a", newSigner())
		if err != nil || got[m.ID] != nil || fails[m.ID] == nil || !strings.Contains(fails[m.ID].Error(), "a host takes") {
			t.Fatalf("compose: %v, composed %v, failed %v", err, got[m.ID] != nil, fails[m.ID])
		}
	})
}

// TestSealSingles_TheCurrentDeclarationsStoredWithoutOne: when an instance
// of a build before batch envelopes joins (a controller rolled back, or a
// rolling upgrade), it sends a declaration's stored single envelope as it
// is — empty for every one stored with its batch envelope only, until the
// next change. SealSingles signs and stores that envelope for every
// machine's current declaration stored without one; an older generation's
// is left as it is, and a second pass signs nothing.
func TestSealSingles_TheCurrentDeclarationsStoredWithoutOne(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m1, m2 := fixture(t, s, "m1"), fixture(t, s, "m2")
		if _, _, err := s.Compose(ctx, []int64{m1.ID, m2.ID}, "ctl-a", newSigner()); err != nil {
			t.Fatal(err)
		}
		old := m2.Generation
		if _, err := s.Push(ctx, "test", "m2", &old); err != nil {
			t.Fatal(err)
		}
		got, _, err := s.Compose(ctx, []int64{m2.ID}, "ctl-a", newSigner())
		if err != nil {
			t.Fatal(err)
		}
		sg := newSigner()
		n, err := s.SealSingles(ctx, sg)
		if err != nil || n != 2 {
			t.Fatalf("signed %d: %v", n, err)
		}
		for _, m := range []*models.Machine{m1, m2} {
			cur, _ := s.Machine(ctx, m.Name)
			d, err := s.Declaration(ctx, m.ID, cur.Generation)
			if err != nil {
				t.Fatal(err)
			}
			single, err := models.OpenEnvelope(d.Envelope, trustedBy(sg))
			if err != nil {
				t.Fatalf("%s: %v", m.Name, err)
			}
			if batched, _ := models.PayloadOf(d.Batch); !bytes.Equal(single, batched) {
				t.Fatalf("%s: the single envelope carries other payload bytes than the batch one", m.Name)
			}
		}
		if d, _ := s.Declaration(ctx, m2.ID, old); len(d.Envelope) != 0 {
			t.Fatal("an older generation's declaration was signed too")
		}
		if got[m2.ID] == nil {
			t.Fatal("no composed declaration")
		}
		if n, err := s.SealSingles(ctx, newSigner()); err != nil || n != 0 {
			t.Fatalf("a second pass signed %d: %v", n, err)
		}
	})
}
