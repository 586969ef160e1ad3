package api_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
	"mesh/testwait"
)

// TestRollingUpgrade_OlderInstanceGetsSingleEnvelopes: while an instance of
// a build from before batch envelopes serves from the same store (a
// rolling upgrade of the controllers), that instance sends a declaration's
// stored single-signature envelope as it is — so this one signs it when it
// composes, even for a host that verifies batches. Without such an
// instance, it is left to a host's first need.
func TestRollingUpgrade_OlderInstanceGetsSingleEnvelopes(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d, ctltest.Options{HeartbeatEvery: 50 * time.Millisecond})
			ctx := context.Background()
			en := e.Enroll("m1")
			m, err := e.Ctl.Store.Machine(ctx, "m1")
			if err != nil {
				t.Fatal(err)
			}
			gen, version := int64(0), 1
			// next bumps m1 and polls as a host that verifies batches; it
			// returns the stored declaration of the new generation.
			next := func() *models.Declaration {
				t.Helper()
				if gen > 0 {
					e.JSON(ctltest.Request{Method: "PUT", Path: "/api/v1/machines/m1/variables", Token: e.Admin,
						Header: map[string]string{"If-Match": `"` + strconv.Itoa(version) + `"`},
						Body:   map[string]any{"variables": map[string]string{"n": strconv.FormatInt(gen, 10)}}}, 200, nil)
					version++
				}
				p := pollWith(e, en.Token, gen, "5s", models.EnvelopeBatch)
				if p.status != 200 {
					t.Fatalf("poll after generation %d: %d", gen, p.status)
				}
				openBatch(t, en, p.body)
				gen, _ = strconv.ParseInt(strings.Trim(p.etag, `"`), 10, 64)
				got, err := e.Ctl.Store.Declaration(ctx, m.ID, gen)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if d := next(); len(d.Envelope) != 0 {
				t.Fatalf("generation %d: a single envelope was signed with no host or instance needing it", d.Generation)
			}

			// An instance of an earlier build (it records no store schema) serves.
			if err := e.Ctl.Store.RegisterInstance(ctx, &models.Instance{ID: "ctl-old", Version: "0.9.0", State: models.InstanceServing}); err != nil {
				t.Fatal(err)
			}
			testwait.For(t, 10*time.Second, "the older instance noticed", e.Ctl.Hub.SingleForAll)
			d1 := next()
			if len(d1.Envelope) == 0 {
				t.Fatalf("generation %d: no single envelope while an instance of an earlier build serves", d1.Generation)
			}
			verify(t, en, d1.Envelope)

			// It stops: single envelopes are left to a host's first need again.
			if err := e.Ctl.Store.SetInstanceState(ctx, "ctl-old", models.InstanceStopped); err != nil {
				t.Fatal(err)
			}
			testwait.For(t, 10*time.Second, "the older instance's stop noticed", func() bool { return !e.Ctl.Hub.SingleForAll() })
			if d2 := next(); len(d2.Envelope) != 0 {
				t.Fatalf("generation %d: a single envelope signed after the older instance stopped", d2.Generation)
			}
		})
	}
}
