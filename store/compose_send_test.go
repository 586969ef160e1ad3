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
		sendAll := func(chunk []int64, out map[int64]*models.Composed) []models.Send {
			var rows []models.Send
			for _, id := range chunk {
				if c := out[id]; c != nil {
					rows = append(rows, models.SendOf(c, "ctl-a"))
				}
			}
			return rows
		}
		var sent []models.Send
		record := func(chunk []int64, out map[int64]*models.Composed) []models.Send {
			sent = sendAll(chunk, out)
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
		failing := func(chunk []int64, out map[int64]*models.Composed) []models.Send {
			rows := sendAll(chunk, out)
			return append(rows, rows[0])
		}
		bumped, _, err := s.ComposeAndSend(ctx, ids, "ctl-a", newSigner(), nil, failing)
		if err == nil {
			t.Fatal("a send row twice: no error")
		}
		for _, id := range ids {
			if _, err := s.Declaration(ctx, id, gens[id]); !errors.Is(err, models.ErrNotFound) {
				t.Fatalf("machine %d: its declaration stored by a failed transaction (%v; composed %v)", id, err, bumped[id] != nil)
			}
		}
		if n, err := s.CountSends(ctx); err != nil || n != before+2*int64(len(ids)) {
			t.Fatalf("%d send rows after a failed transaction (%v), want %d", n, err, before+2*int64(len(ids)))
		}
	})
}
