package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
	"mesh/testwait"
)

// Reports that arrive while another write holds SQLite's turn are
// committed together in one transaction, and one refused among them
// (naming a send that does not exist) is refused alone: the others are
// stored, move what their machines applied, and say so to their callers.
// On PostgreSQL, where reports are not grouped, the same reports arrive
// together and end the same.
func TestWriteGrouped_OneRefusedAmongMany(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) { oneRefusedAmongMany(t, storetest.MustOpen(t, d), d == store.SQLite) })
	}
}

func oneRefusedAmongMany(t *testing.T, s *store.Store, grouped bool) {
	ctx := context.Background()
	ids := fixtures(t, s, 6)
	sends := make([]models.Send, len(ids))
	for i, id := range ids {
		m, err := s.Machine(ctx, fmt.Sprintf("m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		sends[i] = models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: id, Generation: m.Generation, InstanceID: "test", CreatedAt: time.Now().UTC()}
	}
	if err := s.InsertSends(ctx, sends); err != nil {
		t.Fatal(err)
	}
	const refused = 2
	release := func() {}
	if grouped {
		release = s.HoldWrites()
	}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		r := &models.Report{Send: sends[i].ID, Generation: sends[i].Generation, Outcome: models.OutcomeApplied, HostVersion: "1.0.0"}
		if i == refused {
			r.Send = uuid.Must(uuid.NewV7()).String()
		}
		wg.Go(func() {
			_, errs[i] = s.InsertReport(ctx, id, r, []byte(`{}`))
		})
	}
	if grouped {
		testwait.For(t, 10*time.Second, "every report queued behind the held turn", func() bool { return s.Queued() == len(ids) })
	}
	release()
	wg.Wait()
	for i, id := range ids {
		m, err := s.Machine(ctx, fmt.Sprintf("m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if i == refused {
			if !errors.Is(errs[i], models.ErrInvalid) {
				t.Fatalf("the report naming no send: %v, want invalid", errs[i])
			}
			if m.AppliedGeneration != 0 {
				t.Fatalf("the refused report moved machine %d to applied %d", id, m.AppliedGeneration)
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("report %d: %v", i, errs[i])
		}
		if m.AppliedGeneration != sends[i].Generation {
			t.Fatalf("machine %d applied %d, want %d", id, m.AppliedGeneration, sends[i].Generation)
		}
	}
	var n int64
	s.DB().Table("reports").Count(&n)
	if n != int64(len(ids)-1) {
		t.Fatalf("%d reports stored, want %d", n, len(ids)-1)
	}
}

// A grouped write that panics takes its group's writes with it (each
// told so, none left waiting), and the next write still gets a turn.
func TestWriteGrouped_Panic(t *testing.T) {
	s := storetest.MustOpen(t, store.SQLite)
	errs := grouped(t, s, 3, nil, func(i int, tx *store.Tx) error {
		if i == 1 {
			panic("a write's bug")
		}
		return note(i, tx)
	}, nil)
	for i, err := range errs {
		if err == nil {
			t.Fatalf("write %d succeeded in a group that rolled back", i)
		}
	}
	if got := noted(s); got != "[]" {
		t.Fatalf("rows of a rolled-back group stored: %s", got)
	}
	if err := s.WriteGrouped(context.Background(), func(tx *store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// A grouped write that fails after writing rolls back what it wrote, and
// only that: the writes before and after it in its group are stored.
func TestWriteGrouped_ErrorRollsBackItsOwn(t *testing.T) {
	s := storetest.MustOpen(t, store.SQLite)
	errs := grouped(t, s, 5, nil, func(i int, tx *store.Tx) error {
		if err := note(i, tx); err != nil {
			return err
		}
		if i == 2 {
			return models.Invalid("x", "refused after writing")
		}
		return nil
	}, nil)
	if got := noted(s); got != "[0 1 3 4]" {
		t.Fatalf("stored %s, want [0 1 3 4]", got)
	}
	for i, err := range errs {
		if (i == 2) != errors.Is(err, models.ErrInvalid) || i != 2 && err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
}

// A write whose caller gave up while it waited for a turn is not run: its
// caller hears why, and the others of its group are stored.
func TestWriteGrouped_CallerGaveUp(t *testing.T) {
	s := storetest.MustOpen(t, store.SQLite)
	gone, giveUp := context.WithCancel(context.Background())
	ctxOf := func(i int) context.Context {
		if i == 1 {
			return gone
		}
		return context.Background()
	}
	errs := grouped(t, s, 3, ctxOf, note, giveUp)
	if got := noted(s); got != "[0 2]" {
		t.Fatalf("stored %s, want [0 2]", got)
	}
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], context.Canceled) {
		t.Fatalf("errors %v, want the second canceled alone", errs)
	}
}

// grouped runs n grouped writes, write i as fn(i, tx) under ctxOf(i) (nil:
// the background), queued behind a held turn so that one turn takes them
// all; then runs meanwhile, releases the turn and returns each write's
// error (a panic an error too).
func grouped(t *testing.T, s *store.Store, n int, ctxOf func(int) context.Context, fn func(int, *store.Tx) error, meanwhile func()) []error {
	t.Helper()
	release := s.HoldWrites()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		ctx := context.Background()
		if ctxOf != nil {
			ctx = ctxOf(i)
		}
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("panicked: %v", p)
				}
			}()
			errs[i] = s.WriteGrouped(ctx, func(tx *store.Tx) error { return fn(i, tx) })
		})
	}
	testwait.For(t, 10*time.Second, "the writes queued behind the held turn", func() bool { return s.Queued() == n })
	if meanwhile != nil {
		meanwhile()
	}
	release()
	wg.Wait()
	return errs
}

// note writes a row telling write i was stored; noted lists them.
func note(i int, tx *store.Tx) error {
	return tx.Exec("INSERT INTO audit_events (actor, action, target, detail, at) VALUES (?, ?, ?, ?, ?)",
		"t", "a", fmt.Sprint(i), "", time.Now().UTC()).Error
}

func noted(s *store.Store) string {
	var targets []string
	s.DB().Table("audit_events").Where("actor = ?", "t").Order("target").Pluck("target", &targets)
	return fmt.Sprint(targets)
}
