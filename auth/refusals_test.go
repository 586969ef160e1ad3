package auth

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRefusals: a key is audited once a minute; the row that is due next
// says how many of it were refused, unaudited, since the last; other keys
// are their own.
func TestRefusals(t *testing.T) {
	now := time.Now()
	r := Refusals{Now: func() time.Time { return now }}
	if due, since := r.Due("a", Row{}); !due || since != 0 {
		t.Fatalf("first refusal: due %v, since %d", due, since)
	}
	for range 5 {
		if due, _ := r.Due("a", Row{}); due {
			t.Fatal("a refusal within the minute was due")
		}
	}
	if due, _ := r.Due("b", Row{}); !due {
		t.Fatal("another key's first refusal was not due")
	}
	now = now.Add(time.Minute)
	if due, since := r.Due("a", Row{}); !due || since != 5 {
		t.Fatalf("a minute on: due %v, since %d; want due with the 5 unaudited", due, since)
	}
	if got := Since(5); got != "; 5 more refused since the last record of it" || Since(0) != "" {
		t.Fatalf("Since: %q", got)
	}
}

// TestRefusals_OverdueAreTaken: refusals counted after a key's row and
// followed by silence are taken, a minute after that row, with the row
// they belong to, once: a burst of 200 refused enrolments then silence was
// one row for the first, the other 199 never written.
func TestRefusals_OverdueAreTaken(t *testing.T) {
	now := time.Now()
	r := Refusals{Now: func() time.Time { return now }}
	row := Row{Actor: "anonymous", Action: "enroll-refused", Target: "machine/m1"}
	for range 200 {
		r.Due("10.0.0.1\x00enroll", row)
	}
	r.Due("quiet", Row{Action: "other"})
	if got := r.Overdue(); len(got) != 0 {
		t.Fatalf("within the minute: %+v", got)
	}
	first := now
	now = now.Add(time.Minute)
	got := r.Overdue()
	if len(got) != 1 || got[0].Row != row || got[0].N != 199 || !got[0].Last.Equal(first) {
		t.Fatalf("a minute on: %+v", got)
	}
	if w := got[0].Words(); w != "199 more refused after the record of "+first.UTC().Format(time.RFC3339)+", none since" {
		t.Fatalf("words: %q", w)
	}
	if again := r.Overdue(); len(again) != 0 {
		t.Fatalf("taken twice: %+v", again)
	}
	// Taken counts as a row: the key's next refusal within the minute is
	// counted, not written.
	if due, _ := r.Due("10.0.0.1\x00enroll", row); due {
		t.Fatal("a refusal just after the overdue ones were taken was due")
	}
}

// TestRefusals_RecordWritesWhatIsDue: Record writes a key's refusal when it
// is due, with how many went unrecorded since, and nothing in between;
// RecordPending writes what a burst left.
func TestRefusals_RecordWritesWhatIsDue(t *testing.T) {
	now := time.Now()
	r := Refusals{Now: func() time.Time { return now }}
	var rows []string
	audit := func(_ context.Context, actor, action, target, detail string) error {
		rows = append(rows, actor+" "+action+" "+target+": "+detail)
		return nil
	}
	row := Row{Actor: "anonymous", Action: "login-throttled", Target: "user/bob"}
	for range 3 {
		if err := r.Record(context.Background(), audit, "bob", row, "10.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Minute)
	_ = r.Record(context.Background(), audit, "bob", row, "10.0.0.1")
	_ = r.Record(context.Background(), audit, "bob", row, "10.0.0.1")
	_ = r.RecordPending(context.Background(), audit)
	want := []string{"anonymous login-throttled user/bob: 10.0.0.1", "anonymous login-throttled user/bob: 10.0.0.1; 2 more refused since the last record of it"}
	if len(rows) != 3 || rows[0] != want[0] || rows[1] != want[1] || !strings.HasPrefix(rows[2], "anonymous login-throttled user/bob: 1 more refused after the record of ") {
		t.Fatalf("rows: %q", rows)
	}
}
