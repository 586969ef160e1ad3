package service

import (
	"errors"
	"testing"

	"mesh/models"
)

func TestUpdateModule_Apply(t *testing.T) {
	str := func(s string) *string { return &s }
	base := func(kind string) *models.Module {
		return &models.Module{Name: "web", Kind: kind, SourcePaths: `["web/"]`, Tiers: `[{"machines":1},{"percent":100}]`,
			TierDeadlineSeconds: 600, OnFailure: models.OnFailureHalt}
	}
	t.Run("OK", func(t *testing.T) {
		m := base(models.KindService)
		r := UpdateModule{Selector: str(" role = web , zone!=b "), Repository: str("team/web"), TierDeadline: str("20m")}
		if err := r.apply(m); err != nil {
			t.Fatal(err)
		}
		if m.Selector != "role=web,zone!=b" || m.Repository != "team/web" || m.TierDeadlineSeconds != 1200 || m.SourcePaths != `["web/"]` {
			t.Fatalf("%+v", m)
		}
	})
	for name, tc := range map[string]struct {
		kind string
		r    UpdateModule
	}{
		"ErrSelector":     {models.KindService, UpdateModule{Selector: str("role=")}},
		"ErrHostSelector": {models.KindHost, UpdateModule{Selector: str("role=web")}},
		"ErrTiers":        {models.KindService, UpdateModule{Tiers: &[]models.Tier{{Machines: 1, Percent: 5}}}},
		"ErrDeadline":     {models.KindService, UpdateModule{TierDeadline: str("5s")}},
		"ErrRollbackHost": {models.KindController, UpdateModule{OnFailure: str(models.OnFailureRollback)}},
	} {
		t.Run(name, func(t *testing.T) {
			m := base(tc.kind)
			before := *m
			if err := tc.r.apply(m); !errors.Is(err, models.ErrInvalid) {
				t.Fatalf("got %v", err)
			}
			if m.Selector != before.Selector || m.Tiers != before.Tiers {
				t.Fatal("a refused change was half applied")
			}
		})
	}
}
