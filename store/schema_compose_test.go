package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

const certManifest = `{"resources": [{"name": "web", "kind": "service", "command": ["/bin/web"]},
	{"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh"], "path": "/etc/web/chain.pem",
	 "key_path": "/etc/web/key.pem", "on_renew": [{"service": "web"}]}]}`

// payloadOf decodes a composed envelope's payload.
func payloadOf(t *testing.T, c *models.Composed) models.DeclarationPayload {
	t.Helper()
	var env models.Envelope
	var p models.DeclarationPayload
	decode(t, c.Sealed(), &env)
	decode(t, env.Payload, &p)
	return p
}

func composeMachine(t *testing.T, s *store.Store, id int64) *models.Composed {
	t.Helper()
	got, fails, err := s.Compose(context.Background(), []int64{id}, "ctl", newSigner())
	if err != nil || fails[id] != nil {
		t.Fatalf("compose: %v %v", err, fails[id])
	}
	return got[id]
}

// TestHostSchemas_ChangeBumpsGeneration: a change in the set of schemas a
// host advertises bumps its machine's generation (trigger schema) in the
// transaction that records it; the same set in another order, or a new
// host version alone, does not.
func TestHostSchemas_ChangeBumpsGeneration(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		var heard []models.Bump
		s.OnBumped(func(bs []models.Bump) { heard = append(heard, bs...) })
		step := func(hv, schema string, wantGen int64, wantTrigger string) {
			t.Helper()
			if err := s.RecordHostInfo(ctx, m.ID, hv, schema); err != nil {
				t.Fatal(err)
			}
			got, err := s.Machine(ctx, "m1")
			if err != nil {
				t.Fatal(err)
			}
			if got.Generation != wantGen || got.GenerationTrigger != wantTrigger || got.Schema != schema || got.HostVersion != hv {
				t.Fatalf("after %s %q: generation %d (%s) schema %q host %s; want %d (%s)",
					hv, schema, got.Generation, got.GenerationTrigger, got.Schema, got.HostVersion, wantGen, wantTrigger)
			}
		}
		step("1.0.1", "1", m.Generation, models.TriggerAssignment)
		step("1.1.0", "1,2", m.Generation+1, models.TriggerSchema)
		step("1.1.1", "1,2", m.Generation+1, models.TriggerSchema)
		step("1.0.0", "1", m.Generation+2, models.TriggerSchema) // a rollback to an older host
		if len(heard) != 2 {
			t.Fatalf("bumps heard = %v, want 2 (the hub wakes the polls)", heard)
		}
	})
}

// TestCompose_HeldBackThenFull: a machine whose desired content needs
// schema 2 while its host decodes only 1 is composed from what it last
// applied (schema 1, the held-back reason on the declaration and the
// machine, which is behind); once its host advertises 2, the bump composes
// the content in full, schema 2, and the reason goes.
func TestCompose_HeldBackThenFull(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		c := composeMachine(t, s, m.ID)
		if c.Schema != 1 || c.HeldBack != "" || payloadOf(t, c).Schema != 1 {
			t.Fatalf("schema-1 content composed as %d (%q)", c.Schema, c.HeldBack)
		}
		sentReport(t, s, m.ID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied, HostVersion: "1.0.0"})
		applied := payloadOf(t, c).Resources

		certModule(t, s)
		g := c.Generation
		if _, err := s.SetAssignments(ctx, "test", "m1", &g, []models.AssignmentView{{Module: "mod"}, {Module: "web"}}); err != nil {
			t.Fatal(err)
		}
		held := composeMachine(t, s, m.ID)
		hp := payloadOf(t, held)
		if held.Schema != 1 || hp.Schema != 1 || hp.Generation != g+1 {
			t.Fatalf("held back composed schema %d/%d generation %d", held.Schema, hp.Schema, hp.Generation)
		}
		hb, _ := json.Marshal(hp.Resources)
		ab, _ := json.Marshal(applied)
		if string(hb) != string(ab) {
			t.Fatalf("held-back resources\n %s\nwant what was applied\n %s", hb, ab)
		}
		want := "held back: needs host schema 2; host 1.0.0 decodes 1"
		if !strings.HasPrefix(held.HeldBack, want) {
			t.Fatalf("reason = %q, want %q…", held.HeldBack, want)
		}
		mm, _ := s.Machine(ctx, "m1")
		if mm.HeldBack != held.HeldBack {
			t.Fatalf("machine's held_back = %q", mm.HeldBack)
		}
		sentReport(t, s, m.ID, &models.Report{Generation: held.Generation, Digest: held.Digest, Outcome: models.OutcomeApplied, HostVersion: "1.0.0"})
		mm, _ = s.Machine(ctx, "m1")
		if st := models.DefaultStateRules.State(mm, ptr(time.Now()), time.Now()); st != models.StateBehind {
			t.Fatalf("state = %s, want behind: it applied held-back content", st)
		}

		if err := s.RecordHostInfo(ctx, m.ID, "1.1.0", "1,2"); err != nil {
			t.Fatal(err)
		}
		full := composeMachine(t, s, m.ID)
		fp := payloadOf(t, full)
		if full.Schema != 2 || fp.Schema != 2 || full.HeldBack != "" || full.Trigger != models.TriggerSchema || len(fp.Resources) != 3 {
			t.Fatalf("after the upgrade: schema %d, reason %q, trigger %s, %d resources", full.Schema, full.HeldBack, full.Trigger, len(fp.Resources))
		}
		if mm, _ = s.Machine(ctx, "m1"); mm.HeldBack != "" {
			t.Fatalf("machine's held_back = %q after a full compose", mm.HeldBack)
		}
	})
}

// TestSends_RecordSchema: the send row keeps the schema of the bytes sent.
func TestSends_RecordSchema(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := fixture(t, s, "m1")
		snd := models.Send{ID: uuid.Must(uuid.NewV7()).String(), MachineID: m.ID, Generation: m.Generation,
			InstanceID: "test", Trigger: models.TriggerSchema, Schema: 2, CreatedAt: time.Now().UTC()}
		if err := s.InsertSends(ctx, []models.Send{snd}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Sends(ctx, m.ID, 10, "")
		if err != nil || len(got) != 1 || got[0].Schema != 2 {
			t.Fatalf("sends = %+v, %v; want schema 2", got, err)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestCompose_HostRolledBackPastAppliedContent pins a host rolled back
// past content it had applied getting no declarations: a trial host
// (1,2) applied schema-2 content, its launcher put the schema-1 host back,
// and composing the held-back generation from what it last applied failed
// (that content needs schema 2), so nothing was sent. The generation its
// poll makes is schema 1, from the newest declaration it applied that its
// host decodes (the one before the trial's), whole, and says so. With no
// such declaration on record nothing is sent, and the compose error says
// why: no resources would tear the machine down.
func TestCompose_HostRolledBackPastAppliedContent(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		addWeb := func(t *testing.T, name string, gen int64) {
			t.Helper()
			if _, err := s.Module(ctx, "web"); err != nil {
				certModule(t, s)
			}
			if _, err := s.SetAssignments(ctx, "test", name, &gen, []models.AssignmentView{{Module: "mod"}, {Module: "web"}}); err != nil {
				t.Fatal(err)
			}
		}
		applied := func(c *models.Composed, hv string) {
			t.Helper()
			sentReport(t, s, c.MachineID, &models.Report{Generation: c.Generation, Digest: c.Digest, Outcome: models.OutcomeApplied, HostVersion: hv})
		}

		t.Run("OK", func(t *testing.T) {
			m := fixture(t, s, "m1") // host 1.0.0 decoding 1
			first := composeMachine(t, s, m.ID)
			applied(first, "1.0.0")
			addWeb(t, "m1", first.Generation)
			held := composeMachine(t, s, m.ID) // schema 1: the mod file
			applied(held, "1.0.0")
			heldRes, _ := json.Marshal(payloadOf(t, held).Resources)

			// The trial (1,2) is sent the module in full and applies it.
			if err := s.RecordHostInfo(ctx, m.ID, "2.0.0", "1,2"); err != nil {
				t.Fatal(err)
			}
			full := composeMachine(t, s, m.ID)
			if full.Schema != 2 || len(payloadOf(t, full).Resources) != 3 {
				t.Fatalf("the trial's generation: schema %d, %d resources", full.Schema, len(payloadOf(t, full).Resources))
			}
			applied(full, "2.0.0")

			// Its launcher puts the schema-1 host back.
			if err := s.RecordHostInfo(ctx, m.ID, "1.0.0", "1"); err != nil {
				t.Fatal(err)
			}
			back := composeMachine(t, s, m.ID)
			bp := payloadOf(t, back)
			got, _ := json.Marshal(bp.Resources)
			if back.Generation <= full.Generation || back.Trigger != models.TriggerSchema || back.Schema != 1 || bp.Schema != 1 ||
				string(got) != string(heldRes) {
				t.Fatalf("after the rollback: generation %d (%s), schema %d/%d, resources\n %s\nwant those of generation %d\n %s",
					back.Generation, back.Trigger, back.Schema, bp.Schema, got, held.Generation, heldRes)
			}
			want := fmt.Sprintf("held back: needs host schema 2; host 1.0.0 decodes 1; no host release known to decode it; "+
				"sent the content of generation %d, the newest it applied that its host decodes (generation %d, applied last, is past it)",
				held.Generation, full.Generation)
			if back.HeldBack != want {
				t.Fatalf("reason = %q\nwant      %q", back.HeldBack, want)
			}
			applied(back, "1.0.0")
			mm, _ := s.Machine(ctx, "m1")
			if mm.HeldBack != want || models.DefaultStateRules.State(mm, ptr(time.Now()), time.Now()) != models.StateBehind {
				t.Fatalf("machine: held_back %q, state %s; want behind with the reason", mm.HeldBack,
					models.DefaultStateRules.State(mm, ptr(time.Now()), time.Now()))
			}
			// Its next generation carries what it now applied last.
			g := mm.Generation
			if _, err := s.SetVariables(ctx, "test", "m1", &g, map[string]string{"port": "9001"}); err != nil {
				t.Fatal(err)
			}
			next := composeMachine(t, s, m.ID)
			if next.HeldBack != "held back: needs host schema 2; host 1.0.0 decodes 1; no host release known to decode it" {
				t.Fatalf("the next generation's reason = %q", next.HeldBack)
			}
		})

		t.Run("ErrNothingItDecodes", func(t *testing.T) {
			m := fixture(t, s, "m2")
			if err := s.RecordHostInfo(ctx, m.ID, "2.0.0", "1,2"); err != nil {
				t.Fatal(err)
			}
			mm, _ := s.Machine(ctx, "m2")
			addWeb(t, "m2", mm.Generation)
			full := composeMachine(t, s, m.ID) // its first applied declaration needs schema 2
			applied(full, "2.0.0")
			if err := s.RecordHostInfo(ctx, m.ID, "1.0.0", "1"); err != nil {
				t.Fatal(err)
			}
			got, fails, err := s.Compose(ctx, []int64{m.ID}, "ctl", newSigner())
			if err != nil || got[m.ID] != nil || fails[m.ID] == nil {
				t.Fatalf("compose: %v %v %v; want a compose error", got[m.ID], fails[m.ID], err)
			}
			want := fmt.Sprintf("the content of generation %d, which it applied last, needs schema 2, its host decodes 1, "+
				"and no earlier declaration it applied that its host decodes is on record", full.Generation)
			if e := fails[m.ID].Error(); !strings.Contains(e, "held back: needs host schema 2; host 1.0.0 decodes 1") || !strings.HasSuffix(e, want) {
				t.Fatalf("compose error = %q\nwant …%s", e, want)
			}
		})
	})
}
