package store

import (
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestSendIDBefore: retention finds old sends by their ids' time, so a
// send id made at t sorts at or after sendIDBefore(t), and before
// sendIDBefore of the next millisecond.
func TestSendIDBefore(t *testing.T) {
	for range 1000 {
		u := uuid.Must(uuid.NewV7())
		sec, nsec := u.Time().UnixTime()
		at := time.Unix(sec, nsec)
		id := u.String()
		if lo, hi := sendIDBefore(at), sendIDBefore(at.Add(time.Millisecond)); id < lo || id >= hi {
			t.Fatalf("send id %s made at %s: want in [%s, %s)", id, at.Format(time.RFC3339Nano), lo, hi)
		}
	}
}
