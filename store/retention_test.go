package store_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// retentionWorld drives one store's clock and records what was delivered.
type retentionWorld struct {
	t     *testing.T
	s     *store.Store
	clock time.Time
	sg    signer
}

func (w *retentionWorld) advance(d time.Duration) { w.clock = w.clock.Add(d) }

// startRetention is a retention world on s, its clock the store's, and
// the retention its tests run: a keep of an hour, epochs of ten minutes,
// pages of one row (five on PostgreSQL, so paging is exercised), run once
// (partitions made ahead; nothing is old yet).
func startRetention(t *testing.T, s *store.Store) (*retentionWorld, store.Retention) {
	t.Helper()
	w := &retentionWorld{t: t, s: s, clock: time.Now().UTC(), sg: newSigner()}
	s.Now = func() time.Time { return w.clock }
	r := store.Retention{Keep: time.Hour, Span: 10 * time.Minute, Batch: 1}
	w.run(r)
	return w, r
}

// deliver composes the machine's current generation and records a send of
// it, as a poll answered 200 does.
func (w *retentionWorld) deliver(m *models.Machine) models.Send {
	w.t.Helper()
	ctx := context.Background()
	got, fails, err := w.s.Compose(ctx, []int64{m.ID}, "ctl-test", w.sg)
	if err != nil || fails[m.ID] != nil {
		w.t.Fatalf("compose %s: %v %v", m.Name, err, fails[m.ID])
	}
	c := got[m.ID]
	snd := models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: m.ID, Generation: c.Generation, Digest: c.Digest,
		InstanceID: "ctl-test", Trigger: c.Trigger, CreatedAt: w.clock}
	if err := w.s.InsertSends(ctx, []models.Send{snd}); err != nil {
		w.t.Fatal(err)
	}
	return snd
}

func (w *retentionWorld) report(snd models.Send, outcome string) {
	w.t.Helper()
	r := &models.Report{Send: snd.ID, Generation: snd.Generation, Digest: snd.Digest, Outcome: outcome}
	if _, err := w.s.InsertReport(context.Background(), snd.MachineID, r, []byte(`{}`)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *retentionWorld) push(m *models.Machine) *models.Machine {
	w.t.Helper()
	g := m.Generation
	m, err := w.s.Push(context.Background(), "test", m.Name, &g)
	if err != nil {
		w.t.Fatal(err)
	}
	return m
}

func (w *retentionWorld) run(r store.Retention) store.RetentionResult {
	w.t.Helper()
	res, err := w.s.RunRetention(context.Background(), r)
	if err != nil {
		w.t.Fatalf("retention: %v", err)
	}
	return res
}

// latest is what a machine's newest records are.
type latest struct {
	Send   string
	Report int64
	Decl   int64
}

func latestOf(t *testing.T, s *store.Store) map[int64]latest {
	t.Helper()
	db := s.DB()
	out := map[int64]latest{}
	var ms []models.Machine
	db.Select("id").Find(&ms)
	for _, m := range ms {
		var l latest
		db.Raw("SELECT coalesce(max(id), '') FROM sends WHERE machine_id = ?", m.ID).Scan(&l.Send)
		db.Raw("SELECT coalesce(max(id), 0) FROM reports WHERE machine_id = ?", m.ID).Scan(&l.Report)
		db.Raw("SELECT coalesce(max(generation), 0) FROM declarations WHERE machine_id = ?", m.ID).Scan(&l.Decl)
		out[m.ID] = l
	}
	return out
}

// TestRetention_KeepsWhatMachinesNeed: after retention runs, every
// machine still has its latest send, report and declaration, its last
// applied send with its declaration and every send of its current
// generation; every kept report names a kept send and every kept send
// has the declaration it carried (every 200 still has its send row); old
// rows nothing needs are gone, and kept rows keep when they happened.
func TestRetention_KeepsWhatMachinesNeed(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)

		// a: applied g1, failed g2, sent g3 twice, then pushed to g4.
		a := fixture(t, s, "a")
		a1 := w.deliver(a)
		w.report(a1, models.OutcomeApplied)
		a = w.push(a)
		a2 := w.deliver(a)
		w.report(a2, models.OutcomeFailed)
		a = w.push(a)
		a3 := w.deliver(a)
		a3b := w.deliver(a)
		// b: idle since its one apply: every row of it is old.
		b := fixture(t, s, "b")
		b1 := w.deliver(b)
		w.report(b1, models.OutcomeApplied)
		// c: applied three generations, then a check changed.
		c := fixture(t, s, "c")
		c1 := w.deliver(c)
		w.report(c1, models.OutcomeApplied)
		c = w.push(c)
		c2 := w.deliver(c)
		w.report(c2, models.OutcomeApplied)
		c = w.push(c)
		c3 := w.deliver(c)
		w.report(c3, models.OutcomeApplied)
		w.report(c3, models.OutcomeChecked)

		w.advance(20 * time.Minute)
		w.run(r) // PostgreSQL: a new epoch
		a = w.push(a)
		a4 := w.deliver(a)

		before := latestOf(t, s)
		times := map[string]time.Time{}
		var all []models.Send
		s.DB().Find(&all)
		for _, snd := range all {
			times[snd.ID] = snd.CreatedAt
		}

		w.advance(100 * time.Minute)
		res := w.run(r)
		t.Logf("%s: %+v", s.Dialect(), res)
		if res.Removed == 0 {
			t.Fatal("nothing removed")
		}
		if s.Dialect() == store.Postgres {
			if len(res.Dropped) != 1 || res.Dropped[0] != 0 || res.Carried == 0 {
				t.Fatalf("want epoch 0 dropped with rows carried forward, got %+v", res)
			}
			var gone bool
			s.DB().Raw("SELECT to_regclass('sends_e0') IS NULL AND to_regclass('reports_e0') IS NULL AND to_regclass('declarations_e0') IS NULL").Scan(&gone)
			if !gone {
				t.Fatal("epoch 0's partitions are still there")
			}
		}

		if after := latestOf(t, s); len(after) != len(before) {
			t.Fatalf("machines: %d before, %d after", len(before), len(after))
		} else {
			for id, l := range before {
				if after[id] != l {
					t.Errorf("machine %d: latest %+v before retention, %+v after", id, l, after[id])
				}
			}
		}
		sendIDs := func() map[string]bool {
			var ids []string
			s.DB().Table("sends").Pluck("id", &ids)
			m := map[string]bool{}
			for _, id := range ids {
				m[id] = true
			}
			return m
		}()
		for _, want := range []models.Send{a1, a2, a4, b1, c3} {
			if !sendIDs[want.ID] {
				t.Errorf("send %s (machine %d, generation %d) is gone", want.ID, want.MachineID, want.Generation)
			}
		}
		for _, gone := range []models.Send{a3, a3b, c1, c2} {
			if sendIDs[gone.ID] {
				t.Errorf("send %s (machine %d, generation %d) was kept: nothing needs it", gone.ID, gone.MachineID, gone.Generation)
			}
		}

		// Every kept report names a kept send; every kept send has the
		// declaration of its digest; carried rows kept their time.
		var reps []models.ReportRow
		s.DB().Find(&reps)
		for _, rep := range reps {
			if rep.SendID != "" && !sendIDs[rep.SendID] {
				t.Errorf("report %d names send %s, which is gone", rep.ID, rep.SendID)
			}
		}
		var kept []models.Send
		s.DB().Find(&kept)
		for _, snd := range kept {
			d, err := s.Declaration(ctx, snd.MachineID, snd.Generation)
			if err != nil || d.Digest != snd.Digest {
				t.Errorf("send %s (generation %d): its declaration %v %v", snd.ID, snd.Generation, d, err)
			}
			if !snd.CreatedAt.Equal(times[snd.ID]) {
				t.Errorf("send %s: made at %s, now says %s", snd.ID, times[snd.ID], snd.CreatedAt)
			}
		}
		var decls []models.Declaration
		s.DB().Where("machine_id = ?", a.ID).Order("generation").Find(&decls)
		var gens []int64
		for _, d := range decls {
			gens = append(gens, d.Generation)
		}
		// a3's generation, sent twice and never finished by its host, goes:
		// the generation moved past it long ago, so no instance answers
		// with it any more.
		if want := []int64{a1.Generation, a2.Generation, a4.Generation}; !slices.Equal(gens, want) {
			t.Errorf("machine a keeps declarations of generations %v, want %v", gens, want)
		}

		// The poll path still writes: a new generation composed and sent.
		b = w.push(b)
		w.deliver(b)
		if again := w.run(r); again.Removed != 0 {
			t.Errorf("a second run removed %d rows more", again.Removed)
		}
		if at, err := s.RecordSince(ctx); err != nil || at == nil || !at.Equal(times[a1.ID]) {
			t.Errorf("record since %v (%v), want %s (machine a's oldest kept send)", at, err, times[a1.ID])
		}
	})
}

// TestCompose_OncePerGenerationAcrossEpochs: an instance composes a
// generation from a snapshot taken before another instance stored it and
// before the retention epoch moved on (on PostgreSQL the key (machine,
// generation) is unique only within an epoch's partition): it finds the
// other's declaration and uses it, so one generation has one
// declaration, byte for byte.
func TestCompose_OncePerGenerationAcrossEpochs(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		clock := time.Now().UTC()
		s.Now = func() time.Time { return clock }
		r := store.Retention{Keep: time.Hour, Span: 10 * time.Minute}
		if _, err := s.RunRetention(ctx, r); err != nil {
			t.Fatal(err)
		}
		m := fixture(t, s, "m1")
		var first *models.Composed
		s.SetBeforeStore(func() {
			s.SetBeforeStore(nil)
			got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl-a", newSigner())
			if err != nil || fails[m.ID] != nil {
				t.Errorf("the other instance's compose: %v %v", err, fails[m.ID])
				return
			}
			first = got[m.ID]
			clock = clock.Add(20 * time.Minute)
			if res, err := s.RunRetention(ctx, r); err != nil {
				t.Errorf("retention: %v %+v", err, res)
			}
		})
		got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl-b", newSigner())
		if err != nil || fails[m.ID] != nil || first == nil {
			t.Fatalf("compose: %v %v", err, fails[m.ID])
		}
		if got[m.ID].Digest != first.Digest || string(got[m.ID].Batch) != string(first.Batch) {
			t.Fatal("two declarations for one generation: the second instance did not find the first's across epochs")
		}
		var n int64
		s.DB().Model(&models.Declaration{}).Where("machine_id = ? AND generation = ?", m.ID, m.Generation).Count(&n)
		if n != 1 {
			t.Fatalf("%d declarations stored for generation %d, want 1", n, m.Generation)
		}
		if s.Dialect() == store.Postgres {
			var epochs []int64
			s.DB().Raw("SELECT epoch FROM retention_epochs ORDER BY epoch").Scan(&epochs)
			if len(epochs) < 2 {
				t.Fatalf("the epoch did not move (%v): the test proves nothing", epochs)
			}
		}
	})
}

// TestRetention_KeepsAppliedSchema1ForARollback: retention keeps a
// machine's newest applied schema-1 declaration (its report and send too)
// after the machine applied schema-2 content, so a host rolled back to
// one that decodes only 1 is still composed that content, whole.
func TestRetention_KeepsAppliedSchema1ForARollback(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)

		m := fixture(t, s, "m1") // host decoding 1
		one := w.deliver(m)
		w.report(one, models.OutcomeApplied)
		m = w.push(m)
		two := w.deliver(m) // schema 1 too: the one a rollback needs
		w.report(two, models.OutcomeApplied)
		if err := s.RecordHostInfo(ctx, m.ID, "2.0.0", "1,2"); err != nil {
			t.Fatal(err)
		}
		certModule(t, s)
		m, _ = s.Machine(ctx, "m1")
		g := m.Generation
		if _, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{{Module: "mod"}, {Module: "web"}}); err != nil {
			t.Fatal(err)
		}
		m, _ = s.Machine(ctx, "m1")
		full := w.deliver(m)
		w.report(full, models.OutcomeApplied)

		w.advance(20 * time.Minute)
		w.run(r)
		w.advance(100 * time.Minute)
		if res := w.run(r); res.Removed == 0 {
			t.Fatal("nothing removed")
		}
		if _, err := s.Declaration(ctx, m.ID, two.Generation); err != nil {
			t.Fatalf("the applied schema-1 declaration of generation %d is gone: %v", two.Generation, err)
		}
		if _, err := s.Declaration(ctx, m.ID, one.Generation); err == nil {
			t.Fatalf("generation %d's declaration was kept: nothing needs it", one.Generation)
		}

		if err := s.RecordHostInfo(ctx, m.ID, "1.0.0", "1"); err != nil {
			t.Fatal(err)
		}
		m, _ = s.Machine(ctx, "m1")
		back := w.deliver(m)
		got, _ := s.Declaration(ctx, m.ID, back.Generation)
		kept, _ := s.Declaration(ctx, m.ID, two.Generation)
		if got.Schema != 1 || string(payloadResources(t, got)) != string(payloadResources(t, kept)) {
			t.Fatalf("after the rollback: schema %d, resources %s; want generation %d's %s",
				got.Schema, payloadResources(t, got), two.Generation, payloadResources(t, kept))
		}
	})
}

// payloadResources is a stored declaration's resources as JSON.
func payloadResources(t *testing.T, d *models.Declaration) []byte {
	t.Helper()
	var p models.DeclarationPayload
	payload, err := models.PayloadOf(d.Sealed())
	if err != nil {
		t.Fatal(err)
	}
	decode(t, payload, &p)
	b, _ := json.Marshal(p.Resources)
	return b
}

// TestRetention_KeepsWhatAKeptSendCarried: a declaration composed long
// ago (ahead of a poll, its host away) and sent within the keep period is
// kept as long as that send is, whatever its own age: it was removed from
// under its send once the machine moved on (on SQLite at once; on
// PostgreSQL had its epoch gone before the send's).
func TestRetention_KeepsWhatAKeptSendCarried(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		w, r := startRetention(t, s)
		a := fixture(t, s, "a")
		got, _, err := s.Compose(ctx, []int64{a.ID}, "ctl-test", w.sg)
		if err != nil {
			t.Fatal(err)
		}
		g := got[a.ID].Generation
		// Its host is away for longer than the keep period.
		for range 14 {
			w.advance(10 * time.Minute)
			w.run(r)
		}
		s1 := w.deliver(a) // the 200 of generation g, now
		w.report(s1, models.OutcomeApplied)
		a = w.push(a)
		s2 := w.deliver(a)
		w.report(s2, models.OutcomeApplied)
		sentAt := w.clock
		for range 14 {
			w.advance(5 * time.Minute)
			w.run(r)
			var nSend, nDecl int64
			s.DB().Raw("SELECT count(*) FROM sends WHERE id = ?", s1.ID).Scan(&nSend)
			s.DB().Raw("SELECT count(*) FROM declarations WHERE machine_id = ? AND generation = ?", a.ID, g).Scan(&nDecl)
			if nSend == 1 && nDecl == 0 {
				t.Fatalf("send %s of generation %d, made %s ago (keep %s), is on record without the declaration it carried",
					s1.ID, g, w.clock.Sub(sentAt), r.Keep)
			}
		}
	})
}
