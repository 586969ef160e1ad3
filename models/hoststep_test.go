package models

import (
	"errors"
	"testing"
)

// TestManifest_NeededSchema: a build needs schema 2 when any resource is a
// certificate or carries a tls check, else 1.
func TestManifest_NeededSchema(t *testing.T) {
	for _, tc := range []struct {
		name, manifest string
		want           int
	}{
		{"Empty", `{"resources": []}`, 1},
		{"Service", `{"resources": [{"name": "web", "kind": "service", "command": ["/bin/web"], "check": {"tcp": "127.0.0.1:80"}}]}`, 1},
		{"Certificate", `{"resources": [{"name": "web", "kind": "service", "command": ["/bin/web"]},
			{"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh"], "path": "/etc/web/tls.crt", "key_path": "/etc/web/tls.key"}]}`, 2},
		{"TLSCheck", `{"resources": [{"name": "web", "kind": "service", "command": ["/bin/web"],
			"check": {"tls": "127.0.0.1:443", "server_name": "web.m1.mesh"}}]}`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseManifest([]byte(tc.manifest))
			if err != nil {
				t.Fatal(err)
			}
			if got := m.NeededSchema(); got != tc.want {
				t.Fatalf("= %d; want %d", got, tc.want)
			}
		})
	}
}

// TestCheckHostReleaseFirst: a plan's host release must decode, on every
// platform it was built for, a schema that expresses the build.
func TestCheckHostReleaseFirst(t *testing.T) {
	amd := func(s string) Release { return Release{OS: "linux", Arch: "amd64", Schemas: s} }
	arm := func(s string) Release { return Release{OS: "linux", Arch: "arm64", Schemas: s} }
	for _, tc := range []struct {
		name string
		rels []Release
		need int
		err  string
	}{
		{"OK_Decodes", []Release{amd("1,2")}, 2, ""},
		{"OK_NeedsOne", []Release{amd("1")}, 1, ""},
		// Schema 3 is past what this controller composes: a later schema
		// may have retired a field, so schema-2 content is not schema 3.
		{"ErrOnlyLater", []Release{amd("1,3")}, 2, "host_release_first: host release 1.5.0 for linux/amd64 decodes 1,3; build 2 of web needs schema 2"},
		{"ErrTooOld", []Release{amd("1")}, 2, "host_release_first: host release 1.5.0 for linux/amd64 decodes 1; build 2 of web needs schema 2"},
		{"ErrOnePlatform", []Release{amd("1,2"), arm("1")}, 2, "host_release_first: host release 1.5.0 for linux/arm64 decodes 1; build 2 of web needs schema 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckHostReleaseFirst("1.5.0", tc.rels, "web", 2, tc.need)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || err.Error() != tc.err {
				t.Fatalf("= %v; want %q", err, tc.err)
			}
		})
	}
}

// TestNeedsHostStep: a host step upgrades only hosts that lack a schema
// the release decodes; one that decodes all of it (the same release, or a
// newer one) is never taken back.
func TestNeedsHostStep(t *testing.T) {
	for _, tc := range []struct {
		name          string
		host, release Schemas
		want          bool
	}{
		{"Old", Schemas{1}, Schemas{1, 2}, true},
		{"Same", Schemas{1, 2}, Schemas{1, 2}, false},
		{"Newer", Schemas{1, 2, 3}, Schemas{1, 2}, false},
		{"OnlyTwo", Schemas{2}, Schemas{1, 2}, true},
		{"ReleaseOlder", Schemas{1, 2}, Schemas{1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NeedsHostStep(tc.host, tc.release); got != tc.want {
				t.Fatalf("= %v; want %v", got, tc.want)
			}
		})
	}
}

// TestJudgeHostStep: the tiers wait while the host step's rollout runs or
// is paused, start once it is done, and the plan halts, saying why, when it
// halted or was cancelled.
func TestJudgeHostStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		ro   *Rollout
		done bool
		halt string
	}{
		{"Running", &Rollout{Version: "1.5.0", State: RolloutRunning}, false, ""},
		{"Paused", &Rollout{Version: "1.5.0", State: RolloutPaused}, false, ""},
		{"Done", &Rollout{Version: "1.5.0", State: RolloutDone}, true, ""},
		{"Halted", &Rollout{Version: "1.5.0", State: RolloutHalted, Reason: "machine m1 rolled back: exit status 1"}, false,
			"host step: rollout of 1.5.0 halted: machine m1 rolled back: exit status 1"},
		{"Cancelled", &Rollout{Version: "1.5.0", State: RolloutCancelled, Reason: "cancelled by alice"}, false,
			"host step: rollout of 1.5.0 cancelled: cancelled by alice"},
		{"Missing", nil, false, "host step: no rollout of 1.5.0 is recorded for the plan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, halt := JudgeHostStep("1.5.0", tc.ro)
			if done != tc.done || halt != tc.halt {
				t.Fatalf("= %v %q; want %v %q", done, halt, tc.done, tc.halt)
			}
		})
	}
}
