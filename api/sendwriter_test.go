package api_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/api"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestSendWriter_MachineRemovedMeanwhile: the send of a machine removed
// after its poll was authorised is refused as unauthorised (its poll
// answers as removed, with no bytes), and the sends written with it are
// written and counted (on SQLite the whole group once failed).
func TestSendWriter_MachineRemovedMeanwhile(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		machine := func(name string) *models.Machine {
			if err := s.CreateJoinToken(ctx, "test", "hash-"+name, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			m, err := s.Enroll(ctx, "hash-"+name, name, "linux", "amd64", "1.0.0", "1", "tok-"+name)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		a, b := machine("a"), machine("b")
		if err := s.DeleteMachine(ctx, "test", "b"); err != nil {
			t.Fatal(err)
		}
		w := api.NewSendWriter(s)
		w.Window = time.Second // both rows in one group
		go w.Run(ctx)
		send := func(m *models.Machine) chan error {
			done := make(chan error, 1)
			go func() {
				done <- w.Write(ctx, models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: m.ID, Generation: m.Generation,
					Digest: "sha256:x", InstanceID: "i", Trigger: "push"})
			}()
			return done
		}
		da, db := send(a), send(b)
		if err := <-da; err != nil {
			t.Errorf("machine a's send: %v", err)
		}
		errB := <-db
		if s.Dialect() == store.SQLite && !errors.Is(errB, models.ErrUnauthorized) {
			t.Errorf("removed machine b's send: %v, want unauthorised", errB)
		}
		want := int64(1)
		if s.Dialect() == store.Postgres {
			want = 2 // a send row does not refer to its machine there
		}
		if got := w.Written(); got != want {
			t.Errorf("%d sends counted as written, want %d", got, want)
		}
	})
}
