package models

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"m1", true}, {"a", true}, {"0", true}, {"node-tools", true}, {"a.b_c-d", true},
		{strings.Repeat("a", 63), true},
		{"", false}, {strings.Repeat("a", 64), false}, {"Node", false}, {"-a", false}, {"a-", false},
		{".a", false}, {"a.", false}, {"a..b", false}, {"a/b", false}, {"a b", false}, {"ä", false},
		{"a\n", false}, {"_a", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			err := ValidName("name", tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidName(%q) = %v, want ok=%v", tc.in, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("not ErrInvalid: %v", err)
			}
		})
	}
}

func TestValidVarKey(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"PORT", true}, {"_x", true}, {"a1", true}, {"A" + strings.Repeat("b", 63), true},
		{"", false}, {"1a", false}, {"a-b", false}, {"a.b", false}, {"A" + strings.Repeat("b", 64), false}, {"a b", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			err := ValidVarKey(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidVarKey(%q) = %v, want ok=%v", tc.in, err, tc.ok)
			}
			var inv *InvalidError
			if err != nil && (!errors.As(err, &inv) || inv.Field != "variables."+tc.in) {
				t.Fatalf("err = %#v, want the field variables.%s", err, tc.in)
			}
		})
	}
}

func TestInvalidError(t *testing.T) {
	t.Run("FieldAndReason", func(t *testing.T) {
		err := Invalid("manifest.mode", "octal")
		if err.Error() != "manifest.mode: octal" || !errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) {
			t.Fatalf("%v", err)
		}
	})
	t.Run("ReasonOnly", func(t *testing.T) {
		if err := Invalid("", "bad"); err.Error() != "bad" {
			t.Fatalf("%q", err.Error())
		}
	})
	t.Run("Wrapped", func(t *testing.T) {
		var inv *InvalidError
		err := errors.Join(errors.New("ctx"), Invalid("f", "r"))
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &inv) || inv.Field != "f" {
			t.Fatalf("%v", err)
		}
	})
}

func TestDigests(t *testing.T) {
	t.Run("DigestOf", func(t *testing.T) {
		// sha256 of the empty string and of "abc" (FIPS 180-2).
		if got := DigestOf(nil); got != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
			t.Fatal(got)
		}
		if got := DigestOf([]byte("abc")); got != "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
			t.Fatal(got)
		}
	})
	good := DigestOf([]byte("x"))
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"OK", good, true},
		{"Empty", "", false},
		{"NoPrefix", good[7:], false},
		{"OtherAlgorithm", "sha512:" + good[7:], false},
		{"Short", good[:70], false},
		{"Long", good + "0", false},
		{"NotHex", good[:70] + "g", false},
		{"Uppercase", "sha256:" + strings.ToUpper(good[7:]), false},
		{"PathInside", "sha256:" + strings.Repeat("../", 21) + "a", false},
	} {
		t.Run("ValidDigest_"+tc.name, func(t *testing.T) {
			if got := ValidDigest(tc.in); got != tc.ok {
				t.Fatalf("ValidDigest(%q) = %v, want %v", tc.in, got, tc.ok)
			}
		})
	}
	t.Run("BlobURL", func(t *testing.T) {
		if got := BlobURL(good); got != "/api/v1/blobs/"+good {
			t.Fatal(got)
		}
	})
}

func TestOutcomes(t *testing.T) {
	for _, tc := range []struct {
		o            string
		valid, final bool
	}{
		{OutcomeApplied, true, true}, {OutcomeRefused, true, true}, {OutcomeRejected, true, true},
		{OutcomeFailed, true, false}, {OutcomeUpgraded, true, false}, {OutcomeRolledBack, true, false},
		{"", false, false}, {"Applied", false, false}, {"ok", false, false},
	} {
		t.Run("Outcome_"+tc.o, func(t *testing.T) {
			if ValidOutcome(tc.o) != tc.valid || FinalOutcome(tc.o) != tc.final {
				t.Fatalf("valid %v final %v; want %v %v", ValidOutcome(tc.o), FinalOutcome(tc.o), tc.valid, tc.final)
			}
		})
	}
}

func TestRoles(t *testing.T) {
	if !(RoleRank(RoleViewer) < RoleRank(RoleOperator) && RoleRank(RoleOperator) < RoleRank(RoleAdmin)) {
		t.Fatal("viewer < operator < admin does not hold")
	}
	for _, tc := range []struct {
		role  string
		valid bool
		rank  int
	}{
		{RoleViewer, true, 1}, {RoleOperator, true, 2}, {RoleAdmin, true, 3},
		{RoleBuilder, true, 0}, // a builder ranks nothing: it may not even view
		{"root", false, 0}, {"", false, 0}, {"Admin", false, 0},
	} {
		t.Run("Role_"+tc.role, func(t *testing.T) {
			if ValidRole(tc.role) != tc.valid || RoleRank(tc.role) != tc.rank {
				t.Fatalf("valid %v rank %d", ValidRole(tc.role), RoleRank(tc.role))
			}
		})
	}
}

func TestMachineState(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	recent := now.Add(-time.Minute)
	old := now.Add(-OfflineAfter - time.Second)
	edge := now.Add(-OfflineAfter)
	for _, tc := range []struct {
		name     string
		m        Machine
		lastSeen *time.Time
		want     string
	}{
		{"Current", Machine{Generation: 3, FinishedGen: 3, LastOutcome: OutcomeApplied}, &recent, StateCurrent},
		{"CurrentNeverReported", Machine{}, &recent, StateCurrent},
		{"Behind", Machine{Generation: 4, FinishedGen: 3, LastOutcome: OutcomeApplied}, &recent, StateBehind},
		{"Failed", Machine{Generation: 4, FinishedGen: 3, LastOutcome: OutcomeFailed}, &recent, StateFailed},
		{"Refused", Machine{Generation: 4, FinishedGen: 4, LastOutcome: OutcomeRefused}, &recent, StateRefused},
		{"Rejected", Machine{Generation: 4, FinishedGen: 4, LastOutcome: OutcomeRejected}, &recent, StateRejected},
		{"RefusedOlderGeneration_Behind", Machine{Generation: 5, FinishedGen: 4, LastOutcome: OutcomeRefused}, &recent, StateBehind},
		{"NeverSeen_Offline", Machine{}, nil, StateOffline},
		{"Silent_Offline", Machine{Generation: 3, FinishedGen: 3}, &old, StateOffline},
		{"AtTheLimit_NotOffline", Machine{Generation: 3, FinishedGen: 3}, &edge, StateCurrent},
		{"Conflict_BeforeOffline", Machine{Conflict: true}, nil, StateConflict},
		{"RolledBack", Machine{Generation: 4, FinishedGen: 3, LastOutcome: OutcomeRolledBack}, &recent, StateRolledBack},
		{"Upgrading", Machine{Generation: 4, FinishedGen: 3, HostVersion: "1.0", TargetHostVersion: "1.1"}, &recent, StateUpgrading},
		{"Upgraded_Current", Machine{Generation: 4, FinishedGen: 4, HostVersion: "1.1", TargetHostVersion: "1.1", LastOutcome: OutcomeUpgraded}, &recent, StateCurrent},
		{"NoTarget_NotUpgrading", Machine{HostVersion: "1.0"}, &recent, StateCurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultStateRules.State(&tc.m, tc.lastSeen, now); got != tc.want {
				t.Fatalf("state = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRelease(t *testing.T) {
	t.Run("Statement", func(t *testing.T) {
		got := string(ReleaseStatement("1.4.2", "linux", "amd64", "sha256:ab"))
		if got != "mesh-host-release/v1\n1.4.2\nlinux\namd64\nsha256:ab\n" {
			t.Fatalf("%q", got)
		}
	})
	t.Run("StatementsDiffer", func(t *testing.T) {
		// A field boundary cannot be moved: each field ends at a newline.
		a := ReleaseStatement("1.0", "linux", "amd64", "d")
		b := ReleaseStatement("1.0\nlinux", "amd64", "", "d")
		if string(a) == string(b) {
			t.Fatal("two releases sign the same statement")
		}
	})
	t.Run("Wire", func(t *testing.T) {
		d := DigestOf([]byte("bin"))
		r := &Release{ID: 9, Version: "1.4.2", OS: "linux", Arch: "arm64", Digest: d, Size: 3, KeyID: "k1", Signature: []byte{1, 2}, State: ReleaseReady}
		want := &HostRelease{Version: "1.4.2", OS: "linux", Arch: "arm64", Digest: d, Size: 3, URL: BlobURL(d), KeyID: "k1", Signature: []byte{1, 2}}
		if got := r.Wire(); !reflect.DeepEqual(got, want) {
			t.Fatalf("wire = %+v", got)
		}
	})
}

// TestWire_V1Shape pins the wire contract's field names: the host decodes
// strictly, so a renamed field is a flag day.
func TestWire_V1Shape(t *testing.T) {
	content := "port=9000\n"
	p := DeclarationPayload{
		Schema: SchemaV1, Machine: "m1", Generation: 42, ComposedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), ComposedBy: "ctl-7f3a",
		Host: &HostRelease{Version: "1.4.2", OS: "linux", Arch: "amd64", Digest: "sha256:h", Size: 9, URL: "/u", KeyID: "k1", Signature: []byte{0xff}},
		Resources: []Resource{
			{ID: "n.config", Module: "n", Build: 17, Kind: "file", Path: "/etc/n.conf", Content: &content, Mode: "0644"},
			{ID: "n.service", Module: "n", Build: 17, Kind: "service", Command: []string{"/bin/run"}, Env: map[string]string{"A": "1"},
				After: []string{"n.config"}, Check: &Check{TCP: "127.0.0.1:9000", Interval: "10s"}, OnRemove: "forget"},
		},
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schema":1,"machine":"m1","generation":42,"composed_at":"2026-11-30T10:00:00Z","composed_by":"ctl-7f3a","empty_ok":false,` +
		`"host":{"version":"1.4.2","os":"linux","arch":"amd64","digest":"sha256:h","size":9,"url":"/u","key_id":"k1","signature":"/w=="},` +
		`"resources":[{"id":"n.config","module":"n","build":17,"kind":"file","path":"/etc/n.conf","content":"port=9000\n","mode":"0644"},` +
		`{"id":"n.service","module":"n","build":17,"kind":"service","command":["/bin/run"],"env":{"A":"1"},"after":["n.config"],` +
		`"check":{"tcp":"127.0.0.1:9000","interval":"10s"},"on_remove":"forget"}]}`
	if string(b) != want {
		t.Fatalf("payload\n got %s\nwant %s", b, want)
	}
	t.Run("RoundTrip", func(t *testing.T) {
		var back DeclarationPayload
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		again, _ := json.Marshal(back)
		if string(again) != string(b) {
			t.Fatalf("not stable:\n%s\n%s", again, b)
		}
	})
	t.Run("Envelope", func(t *testing.T) {
		e, _ := json.Marshal(Envelope{Payload: []byte("{}"), Signatures: []Signature{{KeyID: "k1", Sig: []byte{1}}}})
		if string(e) != `{"payload":"e30=","signatures":[{"key_id":"k1","sig":"AQ=="}]}` {
			t.Fatalf("%s", e)
		}
	})
	t.Run("Report", func(t *testing.T) {
		var r Report
		in := `{"send":"s1","generation":42,"digest":"sha256:d","outcome":"applied","reason":"","attempt":1,"host_version":"1.4.2",
			"actions":[{"resource":"n.runtime","action":"created","digest":"sha256:a","detail":"2 file(s)"}],
			"running":{"n":{"build":17,"digest":"sha256:a"}},"checks":[{"resource":"n.service","ok":true,"at":"2026-11-30T10:00:00Z"}],"future":1}`
		if err := json.Unmarshal([]byte(in), &r); err != nil {
			t.Fatal(err)
		}
		if r.Send != "s1" || r.Generation != 42 || r.Attempt != 1 || r.Running["n"].Build != 17 || len(r.Actions) != 1 || !r.Checks[0].OK {
			t.Fatalf("%+v", r)
		}
	})
}
