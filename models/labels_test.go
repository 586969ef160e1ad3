package models_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/models"
)

func TestParseSelector(t *testing.T) {
	for _, tc := range []struct {
		in, canonical string
	}{
		{"role=web", "role=web"},
		{" role = web , zone!=b ", "role=web,zone!=b"},
		{"gpu,!spot", "gpu,!spot"},
		{"", ""},
	} {
		t.Run("OK "+tc.in, func(t *testing.T) {
			sel, err := models.ParseSelector(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if sel.String() != tc.canonical {
				t.Fatalf("%q, want %q", sel.String(), tc.canonical)
			}
		})
	}
	for _, tc := range []struct{ in, says string }{
		{"role=web,,zone=a", `term 2 (""): empty`},
		{"=web", "no label key"},
		{"role=", "no value after ="},
		{"role!=", "no value after !="},
		{"Role=web", `key "Role" is not a label key`},
		{"role=w=b", "holds an operator"},
		{"role=we b", `value "we b" is not a label value`},
		{"!", "no label key"},
	} {
		t.Run("Err "+tc.in, func(t *testing.T) {
			_, err := models.ParseSelector(tc.in)
			if !errors.Is(err, models.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want one saying %q", err, tc.says)
			}
		})
	}
}

func TestSelector_Matches(t *testing.T) {
	web := map[string]string{"role": "web", "zone": "a"}
	for _, tc := range []struct {
		sel    string
		labels map[string]string
		want   bool
	}{
		{"role=web", web, true},
		{"role=web,zone!=b", web, true},
		{"role=web,zone!=a", web, false},
		{"zone!=b", map[string]string{}, true}, // != holds without the label
		{"role", web, true},
		{"!role", web, false},
		{"!gpu", web, true},
		{"role=db", web, false},
		{"", web, false}, // the empty selector selects nothing
	} {
		t.Run(tc.sel, func(t *testing.T) {
			sel, err := models.ParseSelector(tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			if got := sel.Matches(tc.labels); got != tc.want {
				t.Fatalf("%v on %v = %v", tc.sel, tc.labels, got)
			}
		})
	}
}

func TestReselect(t *testing.T) {
	must := func(s string) models.Selector {
		sel, err := models.ParseSelector(s)
		if err != nil {
			t.Fatal(err)
		}
		return sel
	}
	sels := map[string]models.Selector{"web": must("role=web"), "db": must("role=db"), "mon": must("role")}
	labels := map[string]string{"role": "web"}
	t.Run("GainsWhatMatches", func(t *testing.T) {
		_, gains, loses := models.Reselect(labels, sels, nil)
		if !slices.Equal(gains, []string{"mon", "web"}) || len(loses) != 0 {
			t.Fatalf("gains %v loses %v", gains, loses)
		}
	})
	t.Run("LosesOnlyWhatOnlyTheSelectorGave", func(t *testing.T) {
		rows := map[string]models.SelectedRow{"db": {Selected: true}, "mon": {Selected: true}, "web": {Selected: true}}
		_, gains, loses := models.Reselect(map[string]string{"role": "db"}, sels, rows)
		if len(gains) != 0 || !slices.Equal(loses, []string{"web"}) {
			t.Fatalf("gains %v loses %v", gains, loses)
		}
		rows["web"] = models.SelectedRow{Selected: true, Assigned: true}
		if _, _, loses := models.Reselect(map[string]string{"role": "db"}, sels, rows); len(loses) != 0 {
			t.Fatalf("lost %v, which a person assigned", loses)
		}
	})
	t.Run("AssignedIsNoGain", func(t *testing.T) {
		sel, gains, _ := models.Reselect(labels, sels, map[string]models.SelectedRow{"web": {Assigned: true}, "mon": {Assigned: true}})
		if len(gains) != 0 || !sel["web"] {
			t.Fatalf("gains %v selected %v", gains, sel)
		}
	})
}

func TestValidLabels(t *testing.T) {
	if err := models.ValidLabels("labels", map[string]string{"role": "web", "topology/zone": "eu-1a"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{{"Role": "web"}, {"role": ""}, {"role": "a,b"}, {"role": "x=y"}} {
		if err := models.ValidLabels("labels", bad); !errors.Is(err, models.ErrInvalid) {
			t.Fatalf("%v: got %v", bad, err)
		}
	}
}

func TestMayGrant(t *testing.T) {
	for _, tc := range []struct {
		creator, role string
		ok            bool
	}{
		{"admin", "builder", true}, {"admin", "admin", true}, {"operator", "viewer", true},
		{"operator", "operator", true}, {"operator", "admin", false}, {"operator", "builder", false},
		{"builder", "builder", true}, {"builder", "viewer", false}, {"viewer", "operator", false},
	} {
		t.Run(tc.creator+"→"+tc.role, func(t *testing.T) {
			if err := models.MayGrant(tc.creator, tc.role); (err == nil) != tc.ok {
				t.Fatalf("got %v", err)
			}
		})
	}
}

func TestUserRevocationID(t *testing.T) {
	at := time.Unix(1_700_000_000, 0).UTC()
	id := models.UserRevocationID("ci.bot", at)
	name, got, ok := models.ParseUserRevocationID(id)
	if !ok || name != "ci.bot" || !got.Equal(at) {
		t.Fatalf("%q → %q %v %v", id, name, got, ok)
	}
	if _, _, ok := models.ParseUserRevocationID("abc123"); ok {
		t.Fatal("a session id read as a user's")
	}
}
