package models

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestParseReleaseSchemas: a release's schemas are required, parse like a
// poll's header (with the field named schemas) and must include one this
// controller composes.
func TestParseReleaseSchemas(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Schemas
		err      string // the whole refusal; "" means accepted
	}{
		{"OK_One", "1", Schemas{1}, ""},
		{"OK_Two", "2,1", Schemas{1, 2}, ""},
		{"OK_OnlyTwo", "2", Schemas{2}, ""},
		{"OK_OneAndFuture", "1,3", Schemas{1, 3}, ""},
		{"ErrAbsent", "", nil, "schemas: required: the declaration schemas the host release decodes, like 1,2"},
		{"ErrBlank", "  ", nil, "schemas: required: the declaration schemas the host release decodes, like 1,2"},
		{"ErrWord", "1,two", nil, `schemas: "two" is not a schema number (comma-separated positive integers like 1,2)`},
		{"ErrRepeat", "2,2", nil, "schemas: schema 2 is listed twice"},
		{"ErrZero", "0", nil, "schemas: schema 0 is outside 1..999"},
		{"ErrNoneComposed", "3,4", nil, "schemas: 3,4 decodes none of the schemas this controller composes (1..2)"},
		{"ErrTooLong", "1," + strings.Repeat(" ", 64), nil, "schemas: 66 bytes, at most 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseReleaseSchemas(tc.in)
			if tc.err == "" {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("= %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || err.Error() != tc.err {
				t.Fatalf("= %v, %v; want %q", got, err, tc.err)
			}
		})
	}
}

// TestTrialSchemas: a trial fails when its poll advertises another set
// than the release records; the same set in another order is the same.
func TestTrialSchemas(t *testing.T) {
	for _, tc := range []struct {
		name      string
		want, got Schemas
		reason    string
	}{
		{"OK_Same", Schemas{1, 2}, Schemas{1, 2}, ""},
		{"OK_One", Schemas{1}, Schemas{1}, ""},
		{"FailFewer", Schemas{1, 2}, Schemas{1}, "its trial poll advertised schemas 1; release 1.5.0 records 1,2"},
		{"FailMore", Schemas{1}, Schemas{1, 2}, "its trial poll advertised schemas 1,2; release 1.5.0 records 1"},
		{"FailOther", Schemas{1, 2}, Schemas{2, 3}, "its trial poll advertised schemas 2,3; release 1.5.0 records 1,2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TrialSchemas("1.5.0", tc.want, tc.got); got != tc.reason {
				t.Fatalf("= %q, want %q", got, tc.reason)
			}
		})
	}
}

// TestJudgeUpgraded: an upgraded report is refused only for a trial the
// controller failed; an in-flight, finished, rolled back or unknown one is
// accepted.
func TestJudgeUpgraded(t *testing.T) {
	for _, tc := range []struct {
		name string
		rm   *RolloutMachine
		want string
	}{
		{"NoRollout", nil, ""},
		{"Upgrading", &RolloutMachine{State: UpgradeUpgrading}, ""},
		{"Upgraded", &RolloutMachine{State: UpgradeUpgraded}, ""},
		{"RolledBack", &RolloutMachine{State: UpgradeRolledBack, Reason: "did not start"}, ""},
		{"Failed", &RolloutMachine{State: UpgradeFailed, Reason: "its trial poll advertised schemas 1,2; release 2.0.0 records 1"},
			"upgraded report refused: the trial of host release 2.0.0 on machine m1 failed (its trial poll advertised schemas 1,2; release 2.0.0 records 1); the launcher puts the previous release back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := JudgeUpgraded("m1", "2.0.0", tc.rm)
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, ErrConflict) {
					t.Fatalf("%v is not a conflict", err)
				}
			}
			if got != tc.want {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}
