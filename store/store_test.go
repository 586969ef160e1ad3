package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"crypto/ed25519"

	"github.com/jackc/pgx/v5/pgconn"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

type signer struct{ priv ed25519.PrivateKey }

func (s signer) KeyID() string        { return "k1" }
func (s signer) Sign(p []byte) []byte { return ed25519.Sign(s.priv, p) }

func newSigner() signer {
	_, priv, _ := ed25519.GenerateKey(nil)
	return signer{priv}
}

const manifest = `{"resources": [{"name": "config", "kind": "file", "path": "/etc/x.conf", "content": "port=${var.port}\n"}]}`

// fixtures enrols n machines, m0 … m<n-1>, as fixture does, and returns
// their ids.
func fixtures(t testing.TB, s *store.Store, n int) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for i := range n {
		ids = append(ids, fixture(t, s, fmt.Sprintf("m%d", i)).ID)
	}
	return ids
}

// fixture enrols a machine and assigns it a module with one build.
func fixture(t testing.TB, s *store.Store, name string) *models.Machine {
	t.Helper()
	ctx := context.Background()
	if err := s.CreateJoinToken(ctx, "test", "hash-"+name, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	m, err := s.Enroll(ctx, "hash-"+name, name, "linux", "amd64", "1.0.0", "1", "tok")
	if err != nil {
		t.Fatal(err)
	}
	if mod, err := s.Module(ctx, "mod"); errors.Is(err, models.ErrNotFound) || mod.CurrentBuild == nil {
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "mod", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
			t.Fatal(err)
		}
	}
	g := m.Generation
	if m, err = s.SetVariables(ctx, "test", name, &g, map[string]string{"port": "9000"}); err != nil {
		t.Fatal(err)
	}
	g = m.Generation
	if m, err = s.SetAssignments(ctx, "test", name, &g, []models.AssignmentView{{Module: "mod"}}); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCompose_OncePerGeneration: instances composing the same generation at
// once end with one declaration, byte for byte, whoever wins.
func TestCompose_OncePerGeneration(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		m := fixture(t, s, "m1")
		sg := newSigner()
		var wg sync.WaitGroup
		results := make([]*models.Composed, 8)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, fails, err := s.Compose(context.Background(), []int64{m.ID}, "ctl-"+string(rune('a'+i)), sg)
				if err != nil || fails[m.ID] != nil {
					t.Errorf("compose: %v %v", err, fails[m.ID])
					return
				}
				results[i] = got[m.ID]
			}()
		}
		wg.Wait()
		for _, r := range results[1:] {
			if r == nil || results[0] == nil || !bytes.Equal(r.Batch, results[0].Batch) || r.Generation != m.Generation {
				t.Fatal("two different declarations for one generation")
			}
		}
		var n int64
		s.DB().Model(&models.Declaration{}).Where("machine_id = ?", m.ID).Count(&n)
		if n != 1 {
			t.Fatalf("%d declarations stored, want 1 (only the latest generation was composed)", n)
		}
	})
}

// TestCompose_BatchesRaceOnce: instances composing overlapping batches at
// once (each wins some rows, loses others) all end with the stored bytes of
// every machine, one declaration each.
func TestCompose_BatchesRaceOnce(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		var ids []int64
		for i := range 12 {
			ids = append(ids, fixture(t, s, fmt.Sprintf("m%02d", i)).ID)
		}
		sg := newSigner()
		var wg sync.WaitGroup
		results := make([]map[int64]*models.Composed, 6)
		for i := range results {
			// Each instance composes a different window of the machines,
			// in its own order.
			batch := append([]int64(nil), ids[i:]...)
			batch = append(batch, ids[:i]...)
			batch = batch[:8]
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, fails, err := s.Compose(context.Background(), batch, fmt.Sprintf("ctl-%d", i), sg)
				if err != nil || len(fails) > 0 || len(got) != len(batch) {
					t.Errorf("compose: %v %v, %d of %d composed", err, fails, len(got), len(batch))
					return
				}
				results[i] = got
			}()
		}
		wg.Wait()
		for _, id := range ids {
			var stored []models.Declaration
			if err := s.DB().Where("machine_id = ?", id).Find(&stored).Error; err != nil || len(stored) != 1 {
				t.Fatalf("machine %d: %d declarations stored (%v), want 1", id, len(stored), err)
			}
			for i, got := range results {
				if c := got[id]; c != nil && (!bytes.Equal(c.Batch, stored[0].Batch) || c.Digest != stored[0].Digest) {
					t.Fatalf("instance %d holds declaration bytes for machine %d that are not the stored ones", i, id)
				}
			}
		}
	})
}

// TestCompose_AnotherInstanceStoredFirst: when another instance stores
// some of a chunk's generations between its snapshot and its insert, the
// chunk keeps theirs for those machines (the bytes every instance sends)
// and stores its own for the rest, one declaration a generation (on
// PostgreSQL the plain insert meets their rows and is made again keeping
// them).
func TestCompose_AnotherInstanceStoredFirst(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids := fixtures(t, s, 4)
		// An earlier generation of each is stored too: the chunk finds
		// only what is stored for the generation it composes.
		got0, _, err := s.Compose(ctx, ids, "ctl-a", newSigner())
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"m0", "m1", "m2", "m3"} {
			gen := got0[ids[i]].Generation
			if _, err := s.Push(ctx, "test", name, &gen); err != nil {
				t.Fatal(err)
			}
		}
		s.SetBeforeStore(func() {
			s.SetBeforeStore(nil)
			if _, fails, err := s.Compose(ctx, ids[1:3], "ctl-b", newSigner()); err != nil || len(fails) > 0 {
				t.Errorf("the other instance: %v %v", err, fails)
			}
		})
		got, fails, err := s.Compose(ctx, ids, "ctl-a", newSigner())
		if err != nil || len(fails) > 0 {
			t.Fatalf("a chunk whose generations another instance stored meanwhile: %v %v", err, fails)
		}
		for i, id := range ids {
			var stored []models.Declaration
			if err := s.DB().Where("machine_id = ? AND generation = ?", id, got[id].Generation).Find(&stored).Error; err != nil || len(stored) != 1 {
				t.Fatalf("m%d: %d declarations of generation %d stored (%v), want 1", i, len(stored), got[id].Generation, err)
			}
			want := "ctl-a"
			if i == 1 || i == 2 {
				want = "ctl-b"
			}
			if stored[0].ComposedBy != want || !bytes.Equal(got[id].Batch, stored[0].Batch) {
				t.Fatalf("m%d: stored by %s (want %s); the chunk returned the stored bytes: %v", i, stored[0].ComposedBy, want, bytes.Equal(got[id].Batch, stored[0].Batch))
			}
		}
		// Composed again, every generation is found stored (one probe a
		// machine at the generation it is at, among the earlier ones it
		// keeps): nothing is signed, the same bytes come back.
		counted := &countingSigner{signer: newSigner()}
		again, fails, err := s.Compose(ctx, ids, "ctl-c", counted)
		if err != nil || len(fails) > 0 {
			t.Fatal(err, fails)
		}
		for i, id := range ids {
			if again[id] == nil || !bytes.Equal(again[id].Batch, got[id].Batch) {
				t.Fatalf("m%d composed again: not the stored bytes", i)
			}
		}
		if n := counted.n.Load(); n != 0 {
			t.Fatalf("composing stored generations again signed %d times, want 0", n)
		}
	})
}

// TestCompose_MissingVariableRefused: a declaration with a hole never leaves.
func TestCompose_MissingVariableRefused(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		g := m.Generation
		if _, err := s.SetVariables(ctx, "test", "m1", &g, map[string]string{}); err != nil {
			t.Fatal(err)
		}
		_, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl", newSigner())
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(fails[m.ID], models.ErrInvalid) {
			t.Fatalf("compose without ${var.port}: %v", fails[m.ID])
		}
	})
}

// TestGenerations_BumpInTheSameTransaction: every change to desired state
// bumps the generation, announced only after commit; a stale If-Match
// changes nothing.
func TestGenerations_BumpInTheSameTransaction(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var mu sync.Mutex
		var seen []models.Bump
		s.OnBumped(func(bs []models.Bump) { mu.Lock(); seen = append(seen, bs...); mu.Unlock() })
		m := fixture(t, s, "m1") // enrol 1, variables 2, assignments 3
		if m.Generation != 3 || len(seen) != 3 || seen[2].Generation != 3 {
			t.Fatalf("generation %d, bumps %+v", m.Generation, seen)
		}
		stale := int64(2)
		if _, err := s.Push(ctx, "test", "m1", &stale); !errors.Is(err, models.ErrStaleGeneration) {
			t.Fatalf("stale push: %v", err)
		}
		if _, err := s.SetAssignments(ctx, "test", "m1", &stale, nil); !errors.Is(err, models.ErrStaleGeneration) {
			t.Fatalf("stale assignments: %v", err)
		}
		if len(seen) != 3 {
			t.Fatalf("refused writes announced bumps: %+v", seen)
		}
		// A second build does not become current by arriving; making it
		// current bumps every machine assigned the module.
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
			t.Fatal(err)
		}
		mod, _ := s.Module(ctx, "mod")
		if *mod.CurrentBuild != 1 {
			t.Fatalf("build 2 became current by arriving")
		}
		n, err := s.SetCurrent(ctx, "test", "mod", 2, "")
		if err != nil || n != 1 {
			t.Fatalf("set current: %d %v", n, err)
		}
		m, _ = s.Machine(ctx, "m1")
		if m.Generation != 4 || m.GenerationTrigger != models.TriggerCurrent {
			t.Fatalf("after set current: generation %d trigger %s", m.Generation, m.GenerationTrigger)
		}
	})
}

// TestSetCurrent_AnnouncesWhatItStores: the generations a change announces
// (which the hub composes and wakes by) are the ones it stored, for every
// machine of the module, over more than one chunk of the bump, from
// generations that differ machine to machine. The hub takes a bump it
// announced lower than it has seen as old news: its machine would not be
// composed or woken until the next.
func TestSetCurrent_AnnouncesWhatItStores(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for _, name := range []string{"a", "b"} {
			if err := s.CreateModule(ctx, "test", &models.Module{Name: name, Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
				t.Fatal(err)
			}
		}
		a, _ := s.Module(ctx, "a")
		b, _ := s.Module(ctx, "b")
		now := time.Now().UTC()
		ms := make([]models.Machine, 2500)
		for i := range ms {
			ms[i] = models.Machine{Name: fmt.Sprintf("m%04d", i), Generation: int64(i*7 + 3), GenerationAt: now, Running: "{}", CreatedAt: now}
		}
		if err := s.DB().CreateInBatches(&ms, 100).Error; err != nil {
			t.Fatal(err)
		}
		var as []models.Assignment
		for i, m := range ms {
			as = append(as, models.Assignment{MachineID: m.ID, ModuleID: a.ID, CreatedAt: now})
			if i%3 == 0 {
				as = append(as, models.Assignment{MachineID: m.ID, ModuleID: b.ID, CreatedAt: now})
			}
		}
		if err := s.DB().CreateInBatches(&as, 100).Error; err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		heard := map[int64]models.Bump{}
		s.OnBumped(func(bs []models.Bump) {
			mu.Lock()
			defer mu.Unlock()
			for _, b := range bs {
				if b.Generation > heard[b.MachineID].Generation {
					heard[b.MachineID] = b
				}
			}
		})
		for _, mod := range []string{"b", "a"} {
			for range 2 { // the first build becomes current as it arrives; the second by the change
				if err := s.CreateBuild(ctx, "test", mod, &models.Build{Manifest: manifest}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.SetCurrent(ctx, "test", mod, 2, ""); err != nil {
				t.Fatal(err)
			}
		}
		var stored []models.Machine
		if err := s.DB().Select("id", "name", "generation").Find(&stored).Error; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		wrong := 0
		for _, m := range stored {
			if h := heard[m.ID]; h.Generation != m.Generation || h.Name != m.Name {
				if wrong++; wrong <= 3 {
					t.Errorf("%s: stored generation %d, announced %s at %d", m.Name, m.Generation, h.Name, h.Generation)
				}
			}
		}
		if wrong > 0 || len(stored) != len(ms) {
			t.Fatalf("%d of %d machines announced otherwise than stored", wrong, len(stored))
		}
	})
}

// TestCompose_NeverOlderThanRunning: a machine that reports running build 2
// is not given build 1, the current one, unless a person chose build 1
// with a reason: pinned it, or went back to it for the module. Going back
// without a reason is refused, not taken as a change that moves nothing
// (it printed "3 machine(s) given a new generation" and every machine
// stayed on the newer build).
func TestCompose_NeverOlderThanRunning(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
			t.Fatal(err)
		}
		assign := func(a models.AssignmentView) error {
			m, _ := s.Machine(ctx, "m1")
			g := m.Generation
			_, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{a})
			return err
		}
		two, one := int64(2), int64(1)
		if err := assign(models.AssignmentView{Module: "mod", Build: &two}); err != nil {
			t.Fatal(err)
		}
		m, _ = s.Machine(ctx, "m1")
		sentReport(t, s, m.ID, &models.Report{Generation: m.Generation, Outcome: "applied",
			Running: map[string]models.RunningBuild{"mod": {Build: 2}}})
		buildOf := func() int64 {
			t.Helper()
			got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl", newSigner())
			if err != nil || fails[m.ID] != nil {
				t.Fatalf("compose: %v %v", err, fails[m.ID])
			}
			var env models.Envelope
			var p models.DeclarationPayload
			decode(t, got[m.ID].Sealed(), &env)
			decode(t, env.Payload, &p)
			return p.Resources[0].Build
		}
		// Unpinned, with build 1 current: it keeps the 2 it runs.
		if err := assign(models.AssignmentView{Module: "mod"}); err != nil {
			t.Fatal(err)
		}
		if b := buildOf(); b != 2 {
			t.Fatalf("composed build %d for a machine running 2, current 1", b)
		}
		if _, err := s.SetCurrent(ctx, "test", "mod", 2, ""); err != nil {
			t.Fatal(err)
		}
		var inv *models.InvalidError
		if _, err := s.SetCurrent(ctx, "test", "mod", 1, ""); !errors.As(err, &inv) || inv.Field != "reason" {
			t.Fatalf("back to build 1 without a reason: %v", err)
		}
		if mod, _ := s.Module(ctx, "mod"); *mod.CurrentBuild != 2 || buildOf() != 2 {
			t.Fatalf("a refused going back moved current to %d", *mod.CurrentBuild)
		}
		if err := assign(models.AssignmentView{Module: "mod", Build: &one}); !errors.Is(err, models.ErrDowngrade) {
			t.Fatalf("pin to an older build without a reason: %v", err)
		}
		if err := assign(models.AssignmentView{Module: "mod", Build: &one, Reason: "build 2 leaks"}); err != nil {
			t.Fatal(err)
		}
		if b := buildOf(); b != 1 {
			t.Fatalf("pinned with a reason, composed build %d", b)
		}
		if err := assign(models.AssignmentView{Module: "mod"}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.SetCurrent(ctx, "test", "mod", 1, "build 2 leaks"); err != nil || n != 1 {
			t.Fatalf("back to build 1 with a reason: %d machine(s), %v", n, err)
		}
		if mod, _ := s.Module(ctx, "mod"); mod.CurrentReason != "build 2 leaks" || buildOf() != 1 {
			t.Fatalf("gone back with a reason: module's reason %q, composed %d", mod.CurrentReason, buildOf())
		}
		// Forward again: the reason is dropped, and the rule holds again.
		if _, err := s.SetCurrent(ctx, "test", "mod", 2, ""); err != nil {
			t.Fatal(err)
		}
		if mod, _ := s.Module(ctx, "mod"); mod.CurrentReason != "" || buildOf() != 2 {
			t.Fatalf("forward to 2: module's reason %q, composed %d", mod.CurrentReason, buildOf())
		}
	})
}

// TestWrite_DeadlockVictimRunsAgain: two writers lock two machines in
// opposite orders; PostgreSQL aborts one as a deadlock's victim, and it
// runs again. Both succeed, and a writer runs again only after it was a
// deadlock's victim. How many times is not fixed: a victim's rerun can
// still take a row back before the other writer, woken by its abort, does,
// and the two deadlock once more (write pauses before a rerun to make that
// rare, not impossible), so counting "one writer run twice" was flaky.
func TestWrite_DeadlockVictimRunsAgain(t *testing.T) {
	s := storetest.MustOpen(t, store.Postgres)
	a, b := fixture(t, s, "m1"), fixture(t, s, "m2")
	ctx := context.Background()
	var locked sync.WaitGroup
	locked.Add(2)
	var runs [2][]error // how each run of each writer ended
	write := func(i int, first, second int64) error {
		return s.Write(ctx, func(tx *store.Tx) (err error) {
			defer func() { runs[i] = append(runs[i], err) }()
			if err := tx.Exec("SELECT 1 FROM machines WHERE id = ? FOR UPDATE", first).Error; err != nil {
				return err
			}
			if len(runs[i]) == 0 {
				locked.Done()
				locked.Wait() // both hold their first row: the second locks deadlock
			}
			return tx.Exec("UPDATE machines SET empty_ok = NOT empty_ok WHERE id = ?", second).Error
		})
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, order := range [][2]int64{{a.ID, b.ID}, {b.ID, a.ID}} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = write(i, order[0], order[1]) }()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("writers: %v, %v", errs[0], errs[1])
	}
	if len(runs[0])+len(runs[1]) < 3 {
		t.Fatalf("runs %v: want the deadlock's victim run again", runs)
	}
	for i, rs := range runs {
		for _, err := range rs[:len(rs)-1] {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "40P01" {
				t.Fatalf("writer %d runs %v: want every run but the last aborted as a deadlock's victim", i, rs)
			}
		}
	}
}
