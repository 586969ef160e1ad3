package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestAuditEventsWhere: one target's, action's or actor's events, newest
// first, paged by the cursor as the whole log is; no filter is the whole log.
func TestAuditEventsWhere(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for i := range 30 {
			target := fmt.Sprintf("machine/m%d", i%3)
			action, actor := "push", "alice"
			if i%5 == 0 {
				action, actor = "revoke-machine", "bob"
			}
			if err := s.Audit(ctx, actor, action, target, fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		all, err := s.AuditEvents(ctx, 100, 0)
		if err != nil || len(all) != 30 {
			t.Fatalf("the whole log: %d events, %v", len(all), err)
		}
		details := func(es []models.AuditEvent) string {
			out := ""
			for _, e := range es {
				out += e.Detail + " "
			}
			return out
		}
		m1, err := s.AuditEventsWhere(ctx, 4, 0, models.AuditFilter{Target: "machine/m1"})
		if err != nil || details(m1) != "28 25 22 19 " {
			t.Fatalf("m1's newest four: %q, %v", details(m1), err)
		}
		next, err := s.AuditEventsWhere(ctx, 4, m1[3].ID, models.AuditFilter{Target: "machine/m1"})
		if err != nil || details(next) != "16 13 10 7 " {
			t.Fatalf("m1's next four: %q, %v", details(next), err)
		}
		both, err := s.AuditEventsWhere(ctx, 100, 0, models.AuditFilter{Target: "machine/m0", Action: "revoke-machine", Actor: "bob"})
		if err != nil || details(both) != "15 0 " {
			t.Fatalf("m0's revocations by bob: %q, %v", details(both), err)
		}
		none, err := s.AuditEventsWhere(ctx, 100, 0, models.AuditFilter{Target: "machine/m"})
		if err != nil || len(none) != 0 {
			t.Fatalf("a target matched by its prefix: %q, %v", details(none), err)
		}
		// A person's actions with her API tokens, the controller's with
		// its instances'; a name is not a prefix, nor a LIKE pattern.
		for _, a := range []struct{ actor, detail string }{
			{"user:carol", "c1"}, {"user:carol (API token at-x1)", "c2"}, {"user:carolyn", "c3"},
			{"controller", "k1"}, {"controller:ctl-1a2b3c", "k2"}, {"user:c_rol", "c4"},
		} {
			if err := s.Audit(ctx, a.actor, "push", "machine/x", a.detail); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct{ actor, want string }{
			{"user:carol", "c2 c1 "}, {"controller", "k2 k1 "}, {"user:c_rol", "c4 "}, {"user:caro", ""},
		} {
			got, err := s.AuditEventsWhere(ctx, 100, 0, models.AuditFilter{Actor: c.actor})
			if err != nil || details(got) != c.want {
				t.Errorf("actor %s: %q, want %q (%v)", c.actor, details(got), c.want, err)
			}
		}
	})
}

// TestAudit_APlansWholeStoryOnItsModule: a plan's pause and cancel are on
// its module's record beside its creation, each naming the plan — one
// target tells the plan's whole story (they were under plan/ID, apart).
func TestAudit_APlansWholeStoryOnItsModule(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, v := planOfBuild2(t, s)
		for _, a := range []string{"pause", "cancel"} {
			if _, err := s.SetPlanState(ctx, "user:alice", v.ID, a); err != nil {
				t.Fatal(err)
			}
		}
		es, err := s.AuditEventsWhere(ctx, 50, 0, models.AuditFilter{Target: "module/" + v.Module})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range es {
			if strings.HasSuffix(e.Action, "-plan") {
				got = append(got, e.Action+" "+e.Detail)
			}
		}
		want := fmt.Sprintf("plan %d", v.ID)
		if len(got) != 3 || !strings.HasPrefix(got[0], "cancel-plan "+want+": cancelled") || !strings.HasPrefix(got[1], "pause-plan "+want+": paused") || !strings.HasPrefix(got[2], "create-plan "+want) {
			t.Fatalf("the module's plan events, newest first: %q", got)
		}
	})
}

// TestAudit_WordsFromOutsideBounded: an audit row keeps at most a few
// lines of words that came from outside, whatever their size or bytes (a
// NUL and invalid UTF-8 are refused by PostgreSQL's TEXT): the event
// stays on the record and cannot write the store full.
func TestAudit_WordsFromOutsideBounded(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		detail := "ref refs/heads/\x00\xff" + strings.Repeat("x", 1<<20)
		if err := s.Audit(ctx, "forge:gh", "webhook", "source/"+strings.Repeat("s", 1000), detail); err != nil {
			t.Fatal(err)
		}
		es, err := s.AuditEvents(ctx, 1, 0)
		if err != nil || len(es) != 1 {
			t.Fatalf("%d events, %v", len(es), err)
		}
		e := es[0]
		if len(e.Detail) > models.MaxAuditDetail || len(e.Target) > models.MaxAuditTarget ||
			!strings.HasPrefix(e.Detail, `ref refs/heads/\x00`+"\uFFFD") || !strings.HasSuffix(e.Detail, "…") {
			t.Fatalf("kept %d bytes of detail (%.40q…), %d of target", len(e.Detail), e.Detail, len(e.Target))
		}
	})
}
