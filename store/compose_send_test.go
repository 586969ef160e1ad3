package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestComposeAndSend_OneTransaction: the send rows of polls answered with a
// chunk's declarations are written in the transaction that stores them —
// each row naming its declaration's generation and digest, for a chunk
// composed now and for one whose declarations were stored before (another
// instance's) — and when that transaction fails, neither the declarations
// nor the send rows are there.
func TestComposeAndSend_OneTransaction(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var ids []int64
		var names []string
		for i := range 4 {
			names = append(names, fmt.Sprintf("m%d", i))
			ids = append(ids, fixture(t, s, names[i]).ID)
		}
		sendAll := func(chunk []int64, composed func(int64) *models.Composed) []models.Send {
			var rows []models.Send
			for _, id := range chunk {
				if c := composed(id); c != nil {
					rows = append(rows, models.SendOf(c, "ctl-a"))
				}
			}
			return rows
		}
		var sent []models.Send
		record := func(chunk []int64, composed func(int64) *models.Composed) []models.Send {
			sent = sendAll(chunk, composed)
			return sent
		}
		before, err := s.CountSends(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, fails, err := s.ComposeAndSend(ctx, ids, "ctl-a", newSigner(), nil, record)
		if err != nil || len(fails) > 0 || len(got) != len(ids) || len(sent) != len(ids) {
			t.Fatalf("compose and send: %v %v, %d composed, %d sent", err, fails, len(got), len(sent))
		}
		for _, snd := range sent {
			row, err := s.Send(ctx, snd.ID)
			c := got[snd.MachineID]
			if err != nil || row.Generation != c.Generation || row.Digest != c.Digest || row.InstanceID != "ctl-a" {
				t.Fatalf("machine %d: send row %+v (%v) for declaration %d %s", snd.MachineID, row, err, c.Generation, c.Digest)
			}
		}
		// Stored before: no declaration to insert, the send rows still written.
		again, _, err := s.ComposeAndSend(ctx, ids, "ctl-b", newSigner(), nil, record)
		if err != nil || len(sent) != len(ids) {
			t.Fatalf("sending stored declarations: %v, %d sent", err, len(sent))
		}
		for _, snd := range sent {
			if row, err := s.Send(ctx, snd.ID); err != nil || row.Digest != again[snd.MachineID].Digest || row.Digest != got[snd.MachineID].Digest {
				t.Fatalf("machine %d: send row of a stored declaration %+v (%v)", snd.MachineID, row, err)
			}
		}
		if n, err := s.CountSends(ctx); err != nil || n != before+2*int64(len(ids)) {
			t.Fatalf("%d send rows (%v), want %d", n, err, before+2*int64(len(ids)))
		}

		// A transaction that fails (here a send row's id twice) leaves
		// nothing: a declaration without its send is fine, but the
		// caller is told no row of its was written, and none is.
		gens := map[int64]int64{}
		for i, name := range names {
			g := got[ids[i]].Generation
			m, err := s.SetVariables(ctx, "test", name, &g, map[string]string{"port": "9001"})
			if err != nil {
				t.Fatal(err)
			}
			gens[m.ID] = m.Generation
		}
		failing := func(chunk []int64, composed func(int64) *models.Composed) []models.Send {
			rows := sendAll(chunk, composed)
			return append(rows, rows[0])
		}
		bumped, _, err := s.ComposeAndSend(ctx, ids, "ctl-a", newSigner(), nil, failing)
		if err == nil {
			t.Fatal("a send row twice: no error")
		}
		for _, id := range ids {
			if _, err := s.Declaration(ctx, id, gens[id]); !errors.Is(err, models.ErrNotFound) {
				t.Fatalf("machine %d: its declaration stored by a failed transaction (%v)", id, err)
			}
			// Nor handed back: a poll sent a declaration that was rolled
			// back would carry bytes no later send of it has.
			if c := bumped[id]; c != nil && c.Generation == gens[id] {
				t.Fatalf("machine %d: a failed transaction's declaration of generation %d returned", id, c.Generation)
			}
		}
		if n, err := s.CountSends(ctx); err != nil || n != before+2*int64(len(ids)) {
			t.Fatalf("%d send rows after a failed transaction (%v), want %d", n, err, before+2*int64(len(ids)))
		}
	})
}

// TestComposeAndSend_MachineRemovedMeanwhile: a machine removed between a
// chunk's snapshot and its write costs the chunk nothing: every other
// machine's declaration and send row are written (on SQLite, where a row
// refers to its machine, the chunk is written again without it, and the
// removed machine is neither sent nor returned).
func TestComposeAndSend_MachineRemovedMeanwhile(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := fixtures(t, s, 4)
		// m0's declaration is stored before (only its send row is new);
		// m1's is composed in the chunk. Both are removed meanwhile.
		if _, _, err := s.Compose(ctx, ids[:1], "ctl-b", newSigner()); err != nil {
			t.Fatal(err)
		}
		s.SetBeforeStore(func() {
			s.SetBeforeStore(nil)
			for _, name := range []string{"m0", "m1"} {
				if err := s.DeleteMachine(ctx, "test", name); err != nil {
					t.Errorf("delete %s: %v", name, err)
				}
			}
		})
		var sent []models.Send
		got, _, err := s.ComposeAndSend(ctx, ids, "ctl-a", newSigner(), nil, func(chunk []int64, composed func(int64) *models.Composed) []models.Send {
			sent = sent[:0]
			for _, id := range chunk {
				if c := composed(id); c != nil {
					sent = append(sent, models.SendOf(c, "ctl-a"))
				}
			}
			return sent
		})
		if err != nil {
			t.Fatalf("a chunk with machines removed meanwhile: %v", err)
		}
		written := map[int64]bool{}
		for _, snd := range sent {
			if _, err := s.Send(ctx, snd.ID); err != nil {
				t.Fatalf("machine %d: its send row: %v", snd.MachineID, err)
			}
			written[snd.MachineID] = true
		}
		for _, id := range ids[2:] {
			c := got[id]
			if c == nil || !written[id] {
				t.Fatalf("machine %d, still there: composed %v, sent %v", id, c != nil, written[id])
			}
			if _, err := s.Declaration(ctx, id, c.Generation); err != nil {
				t.Fatalf("machine %d: its declaration: %v", id, err)
			}
		}
		if s.Dialect() == store.SQLite {
			for _, id := range ids[:2] {
				if written[id] || got[id] != nil {
					t.Fatalf("machine %d, removed: sent %v, returned %v", id, written[id], got[id] != nil)
				}
			}
		}
	})
}
