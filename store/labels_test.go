package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// modulesOf are the modules composing gives a machine: the rows of its
// assignments, whoever made them.
func modulesOf(t *testing.T, s *store.Store, name string) []string {
	t.Helper()
	var out []string
	err := s.DB().Table("assignments").Select("modules.name").
		Joins("JOIN modules ON modules.id = assignments.module_id").
		Joins("JOIN machines ON machines.id = assignments.machine_id").
		Where("machines.name = ?", name).Order("modules.name").Pluck("modules.name", &out).Error
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustMachine(t *testing.T, s *store.Store, name string) *models.Machine {
	t.Helper()
	m, err := s.Machine(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// selectWeb gives module web the selector role=web.
func selectWeb(t *testing.T, s *store.Store, sel string, preview bool) *models.ModuleChange {
	t.Helper()
	ctx := context.Background()
	mod, err := s.Module(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.UpdateModule(ctx, "test", "web", mod.ETag(), preview, func(m *models.Module) error { m.Selector = sel; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestLabels_MachinesGainAndLoseTheModule(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "m1")
		fixture(t, s, "m2")
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "web", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		setLabels := func(name string, labels map[string]string, preview bool) *models.LabelChange {
			t.Helper()
			g := mustMachine(t, s, name).Generation
			ch, err := s.SetLabels(ctx, "test", name, &g, labels, preview)
			if err != nil {
				t.Fatal(err)
			}
			return ch
		}
		setLabels("m1", map[string]string{"role": "web", "zone": "a"}, false)
		setLabels("m2", map[string]string{"role": "db"}, false)

		t.Run("SelectorPreviewChangesNothing", func(t *testing.T) {
			g := mustMachine(t, s, "m1").Generation
			ch := selectWeb(t, s, "role=web,zone!=b", true)
			if len(ch.Changes) != 1 || ch.Changes[0].Machine != "m1" || !slices.Equal(ch.Changes[0].Gains, []string{"web"}) {
				t.Fatalf("preview: %+v", ch.Changes)
			}
			if mustMachine(t, s, "m1").Generation != g || slices.Contains(modulesOf(t, s, "m1"), "web") {
				t.Fatal("a preview changed the store")
			}
			if mod, _ := s.Module(ctx, "web"); mod.Selector != "" {
				t.Fatalf("a preview stored the selector %q", mod.Selector)
			}
		})
		t.Run("SelectorGivesTheModuleWithABump", func(t *testing.T) {
			g1, g2 := mustMachine(t, s, "m1").Generation, mustMachine(t, s, "m2").Generation
			ch := selectWeb(t, s, "role=web,zone!=b", false)
			if len(ch.Changes) != 1 || ch.Changes[0].Machine != "m1" {
				t.Fatalf("changes: %+v", ch.Changes)
			}
			m1 := mustMachine(t, s, "m1")
			if m1.Generation != g1+1 || m1.GenerationTrigger != models.TriggerLabel {
				t.Fatalf("m1 at %d (%s), want %d (label)", m1.Generation, m1.GenerationTrigger, g1+1)
			}
			if mustMachine(t, s, "m2").Generation != g2 {
				t.Fatal("m2, not selected, was bumped")
			}
			if got := modulesOf(t, s, "m1"); !slices.Equal(got, []string{"mod", "web"}) {
				t.Fatalf("m1 runs %v", got)
			}
			// Assignments, as a person sees and replaces them, are theirs only.
			as, _, err := s.Assignments(ctx, "m1")
			if err != nil || len(as) != 1 || as[0].Module != "mod" {
				t.Fatalf("assignments %+v, %v", as, err)
			}
		})
		t.Run("ReplacingAssignmentsKeepsSelected", func(t *testing.T) {
			g := mustMachine(t, s, "m1").Generation
			if _, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{}); err != nil {
				t.Fatal(err)
			}
			if got := modulesOf(t, s, "m1"); !slices.Equal(got, []string{"web"}) {
				t.Fatalf("m1 runs %v after its assignments were emptied", got)
			}
			// web has no build: the machine's declaration is empty, as
			// the person asked (a machine whose selected module has a
			// build is not: TestAssignments_EmptiedWhileASelectorKeepsAModule).
			if !mustMachine(t, s, "m1").EmptyOK {
				t.Fatal("a machine emptied on purpose, kept only a module with no build by a selector, is not marked empty")
			}
		})
		t.Run("LabelChangeLosesIt", func(t *testing.T) {
			ch := setLabels("m1", map[string]string{"role": "web", "zone": "b"}, true)
			if len(ch.Changes) != 1 || !slices.Equal(ch.Changes[0].Loses, []string{"web"}) {
				t.Fatalf("preview: %+v", ch.Changes)
			}
			if !slices.Contains(modulesOf(t, s, "m1"), "web") {
				t.Fatal("a preview took the module")
			}
			g := mustMachine(t, s, "m1").Generation
			setLabels("m1", map[string]string{"role": "web", "zone": "b"}, false)
			if got := modulesOf(t, s, "m1"); len(got) != 0 {
				t.Fatalf("m1 runs %v", got)
			}
			if m := mustMachine(t, s, "m1"); m.Generation != g+1 || m.GenerationTrigger != models.TriggerLabel {
				t.Fatalf("m1 at %d (%s)", m.Generation, m.GenerationTrigger)
			}
			// Its last module gone by a person's label change: empty on
			// purpose, so its host removes it rather than refusing.
			if !mustMachine(t, s, "m1").EmptyOK {
				t.Fatal("m1, emptied by a label change, is not marked empty on purpose")
			}
		})
		t.Run("AssignedOutlivesTheSelector", func(t *testing.T) {
			setLabels("m2", map[string]string{"role": "web"}, false)
			g := mustMachine(t, s, "m2").Generation
			pin := int64(1)
			if _, err := s.SetAssignments(ctx, "test", "m2", &g, []models.AssignmentView{{Module: "mod"}, {Module: "web"}}); err != nil {
				t.Fatal(err)
			}
			_ = pin
			setLabels("m2", map[string]string{"role": "db"}, false)
			if got := modulesOf(t, s, "m2"); !slices.Equal(got, []string{"mod", "web"}) {
				t.Fatalf("m2 runs %v; a person assigned web", got)
			}
		})
		t.Run("StaleIfMatch", func(t *testing.T) {
			old := mustMachine(t, s, "m1").Generation - 1
			if _, err := s.SetLabels(ctx, "test", "m1", &old, map[string]string{}, false); !errors.Is(err, models.ErrStaleGeneration) {
				t.Fatalf("got %v", err)
			}
			if _, err := s.UpdateModule(ctx, "test", "web", `"m-0"`, false, func(*models.Module) error { return nil }); !errors.Is(err, models.ErrStaleGeneration) {
				t.Fatalf("module: got %v", err)
			}
		})
		t.Run("EnrolWithTheJoinTokensLabels", func(t *testing.T) {
			if _, err := s.CreateLabelledJoinToken(ctx, "test", "hash-m3", time.Now().Add(time.Hour), `{"role":"web","zone":"a"}`); err != nil {
				t.Fatal(err)
			}
			m, err := s.Enroll(ctx, "hash-m3", "m3", "linux", "amd64", "1.0.0", "1", "tok3")
			if err != nil {
				t.Fatal(err)
			}
			if m.Generation != 1 {
				t.Fatalf("enrolled at generation %d", m.Generation)
			}
			ls, _, err := s.Labels(ctx, "m3")
			if err != nil || ls["role"] != "web" {
				t.Fatalf("labels %v, %v", ls, err)
			}
			if got := modulesOf(t, s, "m3"); !slices.Equal(got, []string{"web"}) {
				t.Fatalf("m3 runs %v", got)
			}
		})
		t.Run("DeleteModuleStillSelected", func(t *testing.T) {
			err := s.DeleteModule(ctx, "test", "web")
			if !errors.Is(err, models.ErrConflict) {
				t.Fatalf("got %v", err)
			}
			selectWeb(t, s, "", false)
			g := mustMachine(t, s, "m2").Generation
			if _, err := s.SetAssignments(ctx, "test", "m2", &g, []models.AssignmentView{{Module: "mod"}}); err != nil {
				t.Fatal(err)
			}
			if got := modulesOf(t, s, "m3"); len(got) != 0 {
				t.Fatalf("m3 runs %v after the selector was cleared", got)
			}
			if err := s.DeleteModule(ctx, "test", "web"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Module(ctx, "web"); !errors.Is(err, models.ErrNotFound) {
				t.Fatalf("got %v", err)
			}
		})
		t.Run("DeleteModuleReportedRunning", func(t *testing.T) {
			if err := s.DB().Model(&models.Machine{}).Where("name = ?", "m1").
				Update("running", `{"mod":{"build":1,"digest":""}}`).Error; err != nil {
				t.Fatal(err)
			}
			g := mustMachine(t, s, "m1").Generation
			if _, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{}); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"m2"} {
				g := mustMachine(t, s, n).Generation
				if _, err := s.SetAssignments(ctx, "test", n, &g, []models.AssignmentView{}); err != nil {
					t.Fatal(err)
				}
			}
			err := s.DeleteModule(ctx, "test", "mod")
			if !errors.Is(err, models.ErrConflict) {
				t.Fatalf("got %v", err)
			}
		})
	})
}

func TestPeople_DisableRevokesAndAPITokens(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for _, u := range []models.User{{Name: "root", Role: "admin"}, {Name: "ci", Role: "operator"}} {
			u.PasswordHash = "x"
			if err := s.CreateUser(ctx, "test", &u); err != nil {
				t.Fatal(err)
			}
		}
		exp := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
		tok := &models.APIToken{ID: "at-1", Name: "build", UserName: "ci", Role: "operator", TokenHash: "h1", ExpiresAt: exp}
		if err := s.CreateAPIToken(ctx, "user:ci", tok); err != nil {
			t.Fatal(err)
		}
		var heard []models.Revocation
		s.OnRevoked(func(rs []models.Revocation) { heard = append(heard, rs...) })

		t.Run("LastUse", func(t *testing.T) {
			at := time.Now().UTC().Truncate(time.Second)
			if err := s.TouchAPITokens(ctx, map[string]time.Time{"at-1": at}); err != nil {
				t.Fatal(err)
			}
			if err := s.TouchAPITokens(ctx, map[string]time.Time{"at-1": at.Add(-time.Hour)}); err != nil {
				t.Fatal(err)
			}
			got, err := s.APIToken(ctx, "at-1")
			if err != nil || got.LastUsedAt == nil || !got.LastUsedAt.Equal(at) {
				t.Fatalf("last use %v, %v", got.LastUsedAt, err)
			}
		})
		t.Run("LastAdminStays", func(t *testing.T) {
			off := true
			if _, err := s.ChangeUser(ctx, "test", "root", store.UserChange{Disabled: &off}); !errors.Is(err, models.ErrConflict) {
				t.Fatalf("got %v", err)
			}
		})
		t.Run("Disable", func(t *testing.T) {
			off := true
			u, err := s.ChangeUser(ctx, "user:root", "ci", store.UserChange{Disabled: &off, SessionTTL: time.Hour})
			if err != nil || u.DisabledAt == nil || u.DisabledBy != "user:root" {
				t.Fatalf("%+v, %v", u, err)
			}
			var userRev *models.Revocation
			for i := range heard {
				if heard[i].Kind == models.RevokedUser {
					userRev = &heard[i]
				}
			}
			if userRev == nil {
				t.Fatalf("no user revocation announced: %+v", heard)
			}
			if name, _, ok := models.ParseUserRevocationID(userRev.TokenID); !ok || name != "ci" {
				t.Fatalf("revocation id %q", userRev.TokenID)
			}
			if want := exp.Add(models.TokenLeeway); !userRev.ExpiresAt.Equal(want) {
				t.Fatalf("kept until %v, want the API token's expiry and the leeway, %v", userRev.ExpiresAt, want)
			}
			rs, err := s.Revocations(ctx)
			if err != nil || !slices.ContainsFunc(rs, func(r models.Revocation) bool { return r.TokenID == userRev.TokenID }) {
				t.Fatalf("not stored: %v", err)
			}
			got, _ := s.APIToken(ctx, "at-1")
			if got.State(time.Now()) != models.APITokenRevoked {
				t.Fatalf("API token %s", got.State(time.Now()))
			}
			if err := s.CreateAPIToken(ctx, "user:ci", &models.APIToken{ID: "at-2", Name: "x", UserName: "ci", Role: "operator", TokenHash: "h2", ExpiresAt: exp}); !errors.Is(err, models.ErrForbidden) {
				t.Fatalf("a disabled user made a token: %v", err)
			}
		})
		t.Run("RevokeOwnOnly", func(t *testing.T) {
			if err := s.CreateAPIToken(ctx, "user:root", &models.APIToken{ID: "at-3", Name: "y", UserName: "root", Role: "viewer", TokenHash: "h3", ExpiresAt: exp}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.RevokeAPIToken(ctx, "user:ci", "ci", "at-3"); !errors.Is(err, models.ErrNotFound) {
				t.Fatalf("another's token: %v", err)
			}
			got, err := s.RevokeAPIToken(ctx, "user:root", "root", "at-3")
			if err != nil || got.RevokedAt == nil {
				t.Fatalf("%+v, %v", got, err)
			}
			if !slices.ContainsFunc(heard, func(r models.Revocation) bool { return r.TokenID == "at-3" && r.Kind == models.RevokedAPIToken }) {
				t.Fatal("the revocation was not announced")
			}
			ts, err := s.APITokens(ctx, "root", 10, "")
			if err != nil || len(ts) != 1 {
				t.Fatalf("%d tokens, %v", len(ts), err)
			}
		})
	})
}

// TestLabels_ConcurrentLabelAndSelectorAgree: a label write and a selector
// change at once (each reads what the other writes) always leave the
// machine with the module exactly when its labels match the selector.
func TestLabels_ConcurrentLabelAndSelectorAgree(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "m1")
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "web", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		roles := []string{"web", "db"}
		for i := range 8 {
			role, sel := roles[i%2], "role="+roles[(i/2)%2]
			errs := make(chan error, 2)
			go func() {
				for {
					g := mustMachineErr(s, "m1")
					_, err := s.SetLabels(ctx, "test", "m1", &g, map[string]string{"role": role}, false)
					if !errors.Is(err, models.ErrStaleGeneration) {
						errs <- err
						return
					}
				}
			}()
			go func() {
				for {
					mod, err := s.Module(ctx, "web")
					if err != nil {
						errs <- err
						return
					}
					_, err = s.UpdateModule(ctx, "test", "web", mod.ETag(), false, func(m *models.Module) error { m.Selector = sel; return nil })
					if !errors.Is(err, models.ErrStaleGeneration) {
						errs <- err
						return
					}
				}
			}()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			want := sel == "role="+role
			if got := slices.Contains(modulesOf(t, s, "m1"), "web"); got != want {
				t.Fatalf("round %d: labels role=%s, selector %s: m1 has web = %v", i, role, sel, got)
			}
		}
	})
}

func mustMachineErr(s *store.Store, name string) int64 {
	m, err := s.Machine(context.Background(), name)
	if err != nil {
		return -1
	}
	return m.Generation
}

// TestLabels_PlansTierSelectedMachines: a plan reaches the machines a
// selector gives the module as it reaches assigned ones.
func TestLabels_PlansTierSelectedMachines(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "m1") // assigned mod, build 1 current
		if err := s.CreateJoinToken(ctx, "test", "hash-m2", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enroll(ctx, "hash-m2", "m2", "linux", "amd64", "1.0.0", "1", "tok2"); err != nil {
			t.Fatal(err)
		}
		g := mustMachine(t, s, "m2").Generation
		if _, err := s.SetLabels(ctx, "test", "m2", &g, map[string]string{"role": "web"}, false); err != nil {
			t.Fatal(err)
		}
		mod, err := s.Module(ctx, "mod")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdateModule(ctx, "test", "mod", mod.ETag(), false, func(m *models.Module) error { m.Selector = "role=web"; return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateBuild(ctx, "test", "mod", &models.Build{Manifest: manifest}, nil); err != nil {
			t.Fatal(err)
		}
		p, err := s.CreatePlan(ctx, "test", "mod", 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range p.Steps {
			got = append(got, st.Machine)
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"m1", "m2"}) {
			t.Fatalf("plan steps on %v, want m1 (assigned) and m2 (selected)", got)
		}
	})
}

// TestAPITokens_Pages: the token list pages by its order's key (newest
// first, then by id), so tokens made the same instant are neither
// skipped nor listed twice; a cursor that names no token is refused.
func TestAPITokens_Pages(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if err := s.CreateUser(ctx, "test", &models.User{Name: "ci", Role: "operator", PasswordHash: "x"}); err != nil {
			t.Fatal(err)
		}
		base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		var want []string
		// Seven tokens over three instants: two ties of three.
		for i, at := range []int{0, 0, 0, 1, 2, 2, 2} {
			s.Now = func() time.Time { return base.Add(time.Duration(at) * time.Millisecond) }
			id := fmt.Sprintf("at-%d", i)
			if err := s.CreateAPIToken(ctx, "user:ci", &models.APIToken{ID: id, Name: "t", UserName: "ci", Role: "operator",
				TokenHash: "h" + id, ExpiresAt: base.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		want = []string{"at-4", "at-5", "at-6", "at-3", "at-0", "at-1", "at-2"}
		var got []string
		after := ""
		for page := 0; page < 10; page++ {
			ts, err := s.APITokens(ctx, "ci", 3, after)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range ts {
				got = append(got, tk.ID)
			}
			if len(ts) < 3 {
				break
			}
			after = ts[len(ts)-1].ID
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pages listed %v, want %v", got, want)
		}
		if _, err := s.APITokens(ctx, "", 3, "no-such-token"); !errors.Is(err, models.ErrInvalid) {
			t.Fatalf("a cursor of no token: %v, want ErrInvalid", err)
		}
	})
}

// TestRevocation_OutlivesTheTokenByItsLeeway: a revocation is kept (read,
// not pruned) past its token's expiry for as long as that token is still
// accepted (models.TokenLeeway); it was dropped at the expiry itself, and
// the token then worked again for the leeway's 30 s.
func TestRevocation_OutlivesTheTokenByItsLeeway(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
		s.Now = func() time.Time { return now }
		exp := now.Add(time.Hour)
		if err := s.Revoke(ctx, "user:carol", &models.Revocation{TokenID: "sess-1", Kind: models.RevokedSession, ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
		kept := func() bool {
			if err := s.PruneRevocations(ctx); err != nil {
				t.Fatal(err)
			}
			rs, err := s.Revocations(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return slices.ContainsFunc(rs, func(r models.Revocation) bool { return r.TokenID == "sess-1" })
		}
		now = exp.Add(models.TokenLeeway - time.Second)
		if !kept() {
			t.Fatal("the revocation is gone while its token is still accepted (within the leeway past its expiry)")
		}
		now = exp.Add(models.TokenLeeway + time.Second)
		if kept() {
			t.Fatal("the revocation outlived its token and the leeway")
		}
	})
}

// TestAPITokens_BoundedPerPerson: a person holds at most
// MaxAPITokensPerUser tokens that are neither revoked nor expired (a
// viewer's session minted 800 year-long tokens in ten seconds); an expired
// one makes room, and the refusal says what to do.
func TestAPITokens_BoundedPerPerson(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if err := s.CreateUser(ctx, "test", &models.User{Name: "vi", Role: "viewer", PasswordHash: "x"}); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		mk := func(i int, expires time.Time) error {
			id := fmt.Sprintf("at-%d", i)
			return s.CreateAPIToken(ctx, "user:vi", &models.APIToken{ID: id, Name: "t", UserName: "vi", Role: "viewer", TokenHash: "h" + id, ExpiresAt: expires})
		}
		if err := mk(0, now.Add(-time.Minute)); err != nil { // expired: not counted
			t.Fatal(err)
		}
		for i := 1; i <= models.MaxAPITokensPerUser; i++ {
			if err := mk(i, now.Add(time.Hour)); err != nil {
				t.Fatalf("token %d: %v", i, err)
			}
		}
		err := mk(models.MaxAPITokensPerUser+1, now.Add(time.Hour))
		if !errors.Is(err, models.ErrConflict) || !strings.Contains(err.Error(), "revoke one first") {
			t.Fatalf("one token past the bound: %v", err)
		}
		// Made and revoked in a loop, each leaves its row, its audit and
		// its revocation: so many a day, revoked or not.
		i := models.MaxAPITokensPerUser + 1
		for ; i < models.MaxAPITokensPerDay; i++ { // at-0 (expired) counts too
			if _, err := s.RevokeAPIToken(ctx, "user:vi", "vi", fmt.Sprintf("at-%d", i-models.MaxAPITokensPerUser)); err != nil {
				t.Fatal(err)
			}
			if err := mk(i, now.Add(time.Hour)); err != nil {
				t.Fatalf("token %d after a revocation: %v", i, err)
			}
		}
		if _, err := s.RevokeAPIToken(ctx, "user:vi", "vi", "at-60"); err != nil {
			t.Fatal(err)
		}
		var ra *models.RetryAfterError
		if err := mk(i, now.Add(time.Hour)); !errors.As(err, &ra) || !errors.Is(err, models.ErrTooManyRequests) || !strings.Contains(err.Error(), "the most a day") {
			t.Fatalf("the day's 101st token: %v", err)
		}
	})
}

// TestAssignments_EmptiedWhileASelectorKeepsAModule: a person empties a
// machine's assignments (PUT []) while a selector keeps a module on it. A
// kept module with no build gives the declaration nothing: it was empty
// but not marked so, and its host refused it while the last module's
// services ran on (README: empty it on purpose, then delete it). A kept
// module with a build runs on, its declaration not empty.
func TestAssignments_EmptiedWhileASelectorKeepsAModule(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		planFixture(t, s) // m1..m3 run mod, which has builds
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "web", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"m1", "m2"} {
			g := mustMachine(t, s, n).Generation
			if _, err := s.SetLabels(ctx, "test", n, &g, map[string]string{"role": "web"}, false); err != nil {
				t.Fatal(err)
			}
		}
		selectWeb(t, s, "role=web", false)
		empty := func(name string) *models.Machine {
			t.Helper()
			g := mustMachine(t, s, name).Generation
			if _, err := s.SetAssignments(ctx, "user:olga", name, &g, []models.AssignmentView{}); err != nil {
				t.Fatal(err)
			}
			return mustMachine(t, s, name)
		}
		if m := empty("m1"); !m.EmptyOK {
			t.Fatalf("m1, emptied, kept only web (no build) by its selector: empty_ok %v", m.EmptyOK)
		}
		mod, err := s.Module(ctx, "mod")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdateModule(ctx, "test", "mod", mod.ETag(), false, func(m *models.Module) error { m.Selector = "role=web"; return nil }); err != nil {
			t.Fatal(err)
		}
		// Emptied by a person, m2 is marked so; mod, kept by its selector,
		// still gives its declaration a build, which is then not empty.
		if m := empty("m2"); !m.EmptyOK || composedBuild(t, s, m) != 1 {
			t.Fatalf("m2, emptied while mod's selector keeps it: empty_ok %v", m.EmptyOK)
		}
	})
}

// TestEnrol_AMachineWithoutLabelsGetsWhatANegativeSelectorGives: a
// selector that holds for a machine with no labels (`!gpu`) gave its
// module to the machines there when it was set, but a machine enrolled
// after with a join token carrying no labels was never judged: its first
// declaration lacked the module, and writing its (empty) labels again
// changed nothing.
func TestEnrol_AMachineWithoutLabelsGetsWhatANegativeSelectorGives(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		fixture(t, s, "m1") // no labels
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "web", Kind: "service", SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		const page = `{"resources": [{"name": "page", "kind": "file", "path": "/srv/web/index.html", "content": "hello\n"}]}`
		if err := s.CreateBuild(ctx, "test", "web", &models.Build{Manifest: page}, nil); err != nil {
			t.Fatal(err)
		}
		ch := selectWeb(t, s, "!gpu", false)
		if len(ch.Changes) != 1 || ch.Changes[0].Machine != "m1" {
			t.Fatalf("selector !gpu: changes %+v, want m1 to gain web", ch.Changes)
		}
		if err := s.CreateJoinToken(ctx, "test", "hash-m2", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		m2, err := s.Enroll(ctx, "hash-m2", "m2", "linux", "amd64", "1.0.0", "1", "tok2")
		if err != nil {
			t.Fatal(err)
		}
		if got := modulesOf(t, s, "m2"); !slices.Equal(got, []string{"web"}) {
			t.Errorf("m2, enrolled without labels under selector !gpu, is given %v; m1, with the same (no) labels, has web", got)
		}
		got, fails, err := s.Compose(ctx, []int64{m2.ID}, "ctl", newSigner())
		if err != nil || len(fails) > 0 {
			t.Fatal(err, fails)
		}
		p, err := models.PayloadOf(got[m2.ID].Batch)
		if err != nil {
			t.Fatal(err)
		}
		var d models.DeclarationPayload
		decode(t, p, &d)
		if len(d.Resources) == 0 {
			t.Errorf("m2's generation %d declares no module, though the selector !gpu gives it web", got[m2.ID].Generation)
		}
	})
}
