package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestInsertSends_RoundTrip: a group of sends, written as one statement,
// reads back field for field, its times comparable with times bound by
// any other statement (retention's cutoff, the record's start).
func TestInsertSends_RoundTrip(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		base := time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
		var sends []models.Send
		for i := range 1200 {
			sends = append(sends, models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: m.ID, Generation: int64(i + 1),
				Digest: fmt.Sprintf("sha256:%064d", i), InstanceID: `ctl-"quoted"\back`, Trigger: "variables ünïcode <&>",
				CreatedAt: base.Add(time.Duration(i) * time.Second)})
		}
		if err := s.InsertSends(ctx, sends); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, 599, 1199} {
			got, err := s.Send(ctx, sends[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			want := sends[i]
			if got.MachineID != want.MachineID || got.Generation != want.Generation || got.Digest != want.Digest ||
				got.InstanceID != want.InstanceID || got.Trigger != want.Trigger || !got.CreatedAt.Equal(want.CreatedAt) {
				t.Fatalf("send %d reads back as %+v, want %+v", i, got, want)
			}
		}
		var older int64
		s.DB().Model(&models.Send{}).Where("created_at < ?", base.Add(600*time.Second)).Count(&older)
		if older != 600 {
			t.Fatalf("%d sends older than the 600th, want 600", older)
		}
		if at, err := s.RecordSince(ctx); err != nil || at == nil || !at.Equal(base) {
			t.Fatalf("record since %v (%v), want %s", at, err, base)
		}
		// A send given without a time is stamped with the store's clock,
		// as gorm's insert stamped it, not the year 1.
		before := time.Now().Add(-time.Minute)
		bare := models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: m.ID, Generation: 5000, Digest: "sha256:bare", InstanceID: "ctl"}
		if err := s.InsertSends(ctx, []models.Send{bare}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Send(ctx, bare.ID); err != nil || got.CreatedAt.Before(before) {
			t.Fatalf("a send given without a time reads back as %+v (%v)", got, err)
		}
	})
}

// TestInsertSends_MachineRemovedMeanwhile: a group holding the send row of
// a machine removed after its poll was authorised writes every other row
// and names the removed machine, on both dialects (on SQLite a send row
// refers to its machine, and the whole group once failed: every poll woken
// with it answered 500).
func TestInsertSends_MachineRemovedMeanwhile(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		a, b := fixture(t, s, "a"), fixture(t, s, "b")
		if err := s.DeleteMachine(ctx, "test", "b"); err != nil {
			t.Fatal(err)
		}
		row := func(m *models.Machine) models.Send {
			return models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: m.ID, Generation: m.Generation, Digest: "sha256:x",
				InstanceID: "i", Trigger: "push", CreatedAt: time.Now().UTC()}
		}
		rows := []models.Send{row(a), row(b), row(a)}
		err := s.InsertSends(ctx, rows)
		var gone *models.MachinesGoneError
		switch {
		case s.Dialect() == store.SQLite && (!errors.As(err, &gone) || !gone.Machines[b.ID] || len(gone.Machines) != 1):
			t.Fatalf("group: %v, want machine %d named as removed", err, b.ID)
		case s.Dialect() == store.Postgres && err != nil:
			// Send rows do not refer to their machine on PostgreSQL (the
			// row of a removed machine goes with retention).
			t.Fatalf("group: %v", err)
		}
		var n int64
		if err := s.DB().Table("sends").Where("machine_id = ?", a.ID).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Errorf("machine a has %d send rows, want 2", n)
		}
	})
}

// TestEnroll_AgainStartsPastTheEarlierMachine: a name enrolled again after
// its machine was deleted starts past the earlier machine's last
// generation (its host finished up to it), and past what a host in
// conflict said it finished, on both dialects.
func TestEnroll_AgainStartsPastTheEarlierMachine(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		if err := s.DB().Exec("UPDATE machines SET generation = 7, conflict_host_generation = 9 WHERE id = ?", m.ID).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMachine(ctx, "test", "m1"); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateJoinToken(ctx, "test", "hash-again", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		again, err := s.Enroll(ctx, "hash-again", "m1", "linux", "amd64", "1.0.0", "1", "tok2")
		if err != nil {
			t.Fatal(err)
		}
		if again.Generation != 10 {
			t.Fatalf("enrolled again at generation %d, want 10 (past the host's 9)", again.Generation)
		}
		if got, _ := s.Machine(ctx, "m1"); got.Generation != 10 {
			t.Fatalf("the store says generation %d", got.Generation)
		}
		if err := s.CreateJoinToken(ctx, "test", "hash-new", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if other, err := s.Enroll(ctx, "hash-new", "m2", "linux", "amd64", "1.0.0", "1", "tok3"); err != nil || other.Generation != 1 {
			t.Fatalf("a new name starts at %+v (%v), want generation 1", other, err)
		}
	})
}

// TestWrite_EndedContextWhileCopying: a write whose context ends while it
// runs (a fan-out at shutdown, a request whose client went away) reaches
// its connection for COPY without a panic — database/sql rolled such a
// transaction back from a goroutine of its own, closing the connection
// under a Conn.Raw that had just found it open — and the copy after it
// fails with the context's error, committing nothing.
func TestWrite_EndedContextWhileCopying(t *testing.T) {
	s := storetest.MustOpen(t, store.Postgres)
	ctx := context.Background()
	m := fixture(t, s, "m1")
	for i := range 20 {
		snd := models.Send{ID: fmt.Sprintf("00000000-0000-7000-8000-%012d", i), MachineID: m.ID, Generation: m.Generation,
			Digest: "d", InstanceID: "ctl", CreatedAt: time.Now()}
		if err := s.CancelThenCopy(ctx, 2000, snd); !errors.Is(err, context.Canceled) {
			t.Fatalf("a write whose context ended: %v, want context.Canceled", err)
		}
		if _, err := s.Send(ctx, snd.ID); !errors.Is(err, models.ErrNotFound) {
			t.Fatalf("the send row of a write whose context ended: %v, want none", err)
		}
	}
}
