package models

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func i64(n int64) *int64 { return &n }

func TestParseManifest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		field string // the InvalidError's field; "" means the manifest is accepted
		n     int    // resources when accepted
	}{
		{"OK", `{"resources": [
			{"name": "runtime", "kind": "tree", "path": "/opt/node-tools"},
			{"name": "config", "kind": "file", "path": "/etc/node-tools.conf", "content": "port=9000\n", "mode": "0644"},
			{"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run"], "after": ["runtime", "config"],
			 "check": {"tcp": "127.0.0.1:9000"}}]}`, "", 3},
		{"OK_Empty", `{"resources": []}`, "", 0},
		{"OK_NoResourcesKey", `{}`, "", 0},
		{"OK_EmptyFileContent", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/f", "content": ""}]}`, "", 1},
		{"OK_ForgetOnRemove", `{"resources": [{"name": "t", "kind": "tree", "path": "/opt/t", "on_remove": "forget"}]}`, "", 1},
		{"OK_ExecCheck", `{"resources": [{"name": "s", "kind": "service", "command": ["/bin/s"], "check": {"exec": ["/bin/true"]}}]}`, "", 1},
		{"ErrNotJSON", `resources`, "manifest", 0},
		{"ErrEmptyBody", ``, "manifest", 0},
		{"ErrUnknownField", `{"resources": [], "extra": 1}`, "manifest", 0},
		{"ErrUnknownResourceField", `{"resources": [{"name": "t", "kind": "tree", "path": "/t", "colour": "red"}]}`, "manifest", 0},
		{"ErrBadName", `{"resources": [{"name": "Runtime", "kind": "tree", "path": "/t"}]}`, "manifest.resources[0].name", 0},
		{"ErrEmptyName", `{"resources": [{"name": "", "kind": "tree", "path": "/t"}]}`, "manifest.resources[0].name", 0},
		{"ErrDuplicateName", `{"resources": [{"name": "a", "kind": "tree", "path": "/a"}, {"name": "a", "kind": "tree", "path": "/b"}]}`, "manifest.resources[1].name", 0},
		{"ErrFileWithoutContent", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/f"}]}`, "manifest.resources[0].content", 0},
		{"ErrFileMode", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/f", "content": "", "mode": "644"}]}`, "manifest.resources[0].mode", 0},
		{"ErrFileModeNotOctal", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/f", "content": "", "mode": "0844"}]}`, "manifest.resources[0].mode", 0},
		{"ErrFileRelativePath", `{"resources": [{"name": "f", "kind": "file", "path": "etc/f", "content": ""}]}`, "manifest.resources[0].path", 0},
		{"ErrTreeNoPath", `{"resources": [{"name": "t", "kind": "tree"}]}`, "manifest.resources[0].path", 0},
		{"ErrTreeDotDot", `{"resources": [{"name": "t", "kind": "tree", "path": "/opt/../etc"}]}`, "manifest.resources[0].path", 0},
		{"ErrServiceNoCommand", `{"resources": [{"name": "s", "kind": "service"}]}`, "manifest.resources[0].command", 0},
		{"ErrUnknownKind", `{"resources": [{"name": "p", "kind": "package", "path": "/p"}]}`, "manifest.resources[0].kind", 0},
		{"ErrOnRemove", `{"resources": [{"name": "t", "kind": "tree", "path": "/t", "on_remove": "keep"}]}`, "manifest.resources[0].on_remove", 0},
		{"ErrCheckNone", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"interval": "10s"}}]}`, "manifest.resources[0].check", 0},
		{"ErrCheckTwo", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"tcp": "a:1", "http": "http://a"}}]}`, "manifest.resources[0].check", 0},
		// The rules below are what every host checks (agent's checkResources):
		// a build that breaks one could never be applied anywhere
		// (found by FuzzManifestAcceptedByHost).
		{"OK_CommandFromVariable", `{"resources": [{"name": "s", "kind": "service", "command": ["${var.BIN}"]}]}`, "", 1},
		{"ErrPathTrailingSlash", `{"resources": [{"name": "t", "kind": "tree", "path": "/opt/t/"}]}`, "manifest.resources[0].path", 0},
		{"ErrPathDoubleSlash", `{"resources": [{"name": "t", "kind": "tree", "path": "/opt//t"}]}`, "manifest.resources[0].path", 0},
		{"ErrPathDot", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/./f", "content": ""}]}`, "manifest.resources[0].path", 0},
		{"ErrPathRoot", `{"resources": [{"name": "t", "kind": "tree", "path": "/"}]}`, "manifest.resources[0].path", 0},
		{"ErrCommandRelative", `{"resources": [{"name": "s", "kind": "service", "command": ["run"]}]}`, "manifest.resources[0].command", 0},
		{"ErrArtifactDigest", `{"resources": [{"name": "t", "kind": "tree", "path": "/t", "artifact": {"digest": "sha256:00"}}]}`, "manifest.resources[0].artifact.digest", 0},
		{"ErrAfterCycle", `{"resources": [{"name": "a", "kind": "tree", "path": "/a", "after": ["b"]}, {"name": "b", "kind": "tree", "path": "/b", "after": ["a"]}]}`, "manifest.resources", 0},
		{"ErrAfterSelf", `{"resources": [{"name": "a", "kind": "tree", "path": "/a", "after": ["a"]}]}`, "manifest.resources", 0},
		{"ErrAfterUnknown", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "after": ["db"]}]}`, "manifest.resources[0].after", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseManifest([]byte(tc.in))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if m.Resources == nil || len(m.Resources) != tc.n {
					t.Fatalf("resources = %#v, want %d (never nil)", m.Resources, tc.n)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want an InvalidError", err)
			}
			if inv.Field != tc.field {
				t.Fatalf("field = %q, want %q (%v)", inv.Field, tc.field, err)
			}
		})
	}
}

// manifestOf is a one-module compose input around a manifest's JSON.
func composeOne(manifest string, vars map[string]string) ComposeInput {
	return ComposeInput{
		Machine: "m1", Generation: 7, ComposedBy: "ctl-1",
		ComposedAt: time.Date(2026, 11, 30, 10, 0, 0, 123456789, time.FixedZone("x", 3600)),
		Variables:  vars,
		Modules:    []ComposeModule{{Name: "node-tools", Build: 17, Digest: DigestOf([]byte("tree")), Size: 4, Manifest: manifest}},
	}
}

func TestComposePayload(t *testing.T) {
	man := `{"resources": [
		{"name": "runtime", "kind": "tree", "path": "/opt/node-tools"},
		{"name": "config", "kind": "file", "path": "/etc/${machine.name}.conf", "content": "port=${var.PORT}\n"},
		{"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run", "--name=${machine.name}"],
		 "env": {"PORT": "${var.PORT}"}, "after": ["runtime", "config"],
		 "check": {"tcp": "127.0.0.1:${var.PORT}", "exec": [], "interval": "10s"}}]}`
	t.Run("OK", func(t *testing.T) {
		p, err := ComposePayload(composeOne(man, map[string]string{"PORT": "9000"}))
		if err != nil {
			t.Fatal(err)
		}
		if p.Schema != SchemaV1 || p.Machine != "m1" || p.Generation != 7 || p.ComposedBy != "ctl-1" {
			t.Fatalf("header = %+v", p)
		}
		if want := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC); !p.ComposedAt.Equal(want) || p.ComposedAt.Location() != time.UTC {
			t.Fatalf("composed_at = %v, want %v in UTC, truncated to the second", p.ComposedAt, want)
		}
		if len(p.Resources) != 3 {
			t.Fatalf("resources = %+v", p.Resources)
		}
		rt, cf, sv := p.Resources[0], p.Resources[1], p.Resources[2]
		if rt.ID != "node-tools.runtime" || rt.Module != "node-tools" || rt.Build != 17 {
			t.Errorf("runtime = %+v", rt)
		}
		if rt.Artifact == nil || rt.Artifact.Digest != DigestOf([]byte("tree")) || rt.Artifact.Size != 4 || rt.Artifact.URL != BlobURL(rt.Artifact.Digest) {
			t.Errorf("a tree without an artifact gets the build's: %+v", rt.Artifact)
		}
		if cf.Path != "/etc/m1.conf" || cf.Content == nil || *cf.Content != "port=9000\n" {
			t.Errorf("config not substituted: %+v", cf)
		}
		if !reflect.DeepEqual(sv.Command, []string{"/opt/node-tools/bin/run", "--name=m1"}) || sv.Env["PORT"] != "9000" || sv.Check.TCP != "127.0.0.1:9000" {
			t.Errorf("service not substituted: %+v %+v", sv, sv.Check)
		}
		if !reflect.DeepEqual(sv.After, []string{"node-tools.runtime", "node-tools.config"}) {
			t.Errorf("after = %v, want module-prefixed ids", sv.After)
		}
	})
	t.Run("OK_ParsedManifestNotChanged", func(t *testing.T) {
		// A batch composes many machines from one parsed manifest: one
		// machine's substitution must not leak into the next.
		parsed, err := ParseManifest([]byte(man))
		if err != nil {
			t.Fatal(err)
		}
		in := composeOne("", map[string]string{"PORT": "1"})
		in.Modules[0].Parsed = parsed
		if _, err := ComposePayload(in); err != nil {
			t.Fatal(err)
		}
		in.Machine, in.Variables = "m2", map[string]string{"PORT": "2"}
		p, err := ComposePayload(in)
		if err != nil {
			t.Fatal(err)
		}
		sv := p.Resources[2]
		if sv.Command[1] != "--name=m2" || sv.Env["PORT"] != "2" || sv.Check.TCP != "127.0.0.1:2" || *p.Resources[1].Content != "port=2\n" {
			t.Fatalf("second machine got the first's values: %+v %+v", sv, sv.Check)
		}
		if parsed.Resources[2].Command[1] != "--name=${machine.name}" || parsed.Resources[2].Env["PORT"] != "${var.PORT}" ||
			parsed.Resources[2].Check.TCP != "127.0.0.1:${var.PORT}" || *parsed.Resources[1].Content != "port=${var.PORT}\n" {
			t.Fatalf("the parsed manifest was written over: %+v", parsed.Resources)
		}
	})
	t.Run("OK_ModulesSortedByName", func(t *testing.T) {
		one := func(path string) string {
			return `{"resources": [{"name": "f", "kind": "file", "path": "` + path + `", "content": ""}]}`
		}
		in := ComposeInput{Machine: "m", Modules: []ComposeModule{{Name: "zeta", Manifest: one("/z")}, {Name: "alpha", Manifest: one("/a")}, {Name: "mid", Manifest: one("/m")}}}
		p, err := ComposePayload(in)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range p.Resources {
			ids = append(ids, r.ID)
		}
		if !reflect.DeepEqual(ids, []string{"alpha.f", "mid.f", "zeta.f"}) {
			t.Fatalf("ids = %v", ids)
		}
		if in.Modules[0].Name != "zeta" {
			t.Fatal("the caller's module slice was sorted in place")
		}
	})
	t.Run("OK_NoModules", func(t *testing.T) {
		p, err := ComposePayload(ComposeInput{Machine: "m", EmptyOK: true})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(p)
		if p.Resources == nil || !strings.Contains(string(b), `"resources":[]`) || !strings.Contains(string(b), `"empty_ok":true`) || !strings.Contains(string(b), `"host":null`) {
			t.Fatalf("empty declaration = %s", b)
		}
	})
	t.Run("OK_ExplicitArtifactKept", func(t *testing.T) {
		d := DigestOf([]byte("other"))
		p, err := ComposePayload(composeOne(`{"resources": [{"name": "t", "kind": "tree", "path": "/t", "artifact": {"digest": "`+d+`", "size": 5, "url": "/x"}}]}`, nil))
		if err != nil {
			t.Fatal(err)
		}
		if a := p.Resources[0].Artifact; a.Digest != d || a.Size != 5 {
			t.Fatalf("artifact = %+v", a)
		}
	})
	for _, tc := range []struct {
		name, manifest string
		vars           map[string]string
		digest         string
		want           string
	}{
		{"ErrVariableMissing", `{"resources": [{"name": "f", "kind": "file", "path": "/f", "content": "${var.PORT}"}]}`, nil, "d", "${var.PORT} is not set on machine m1"},
		{"ErrVariableMissingInEnv", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "env": {"A": "${var.A}"}}]}`, map[string]string{"B": "1"}, "d", "${var.A} is not set"},
		{"ErrVariableMissingInCheck", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"exec": ["/c", "${var.X}"]}}]}`, nil, "d", "${var.X} is not set"},
		{"ErrUnknownPlaceholder", `{"resources": [{"name": "f", "kind": "file", "path": "/f", "content": "${machine.os}"}]}`, nil, "d", "unknown placeholder ${machine.os}"},
		{"ErrTreeWithoutArtifact", `{"resources": [{"name": "t", "kind": "tree", "path": "/t"}]}`, nil, "", "tree t has no artifact"},
		{"ErrPathUncleanOnceSubstituted", `{"resources": [{"name": "t", "kind": "tree", "path": "/opt/${var.D}"}]}`, map[string]string{"D": "../etc"}, "d", `"/opt/../etc" is not an absolute, clean path`},
		{"ErrCommandRelativeOnceSubstituted", `{"resources": [{"name": "s", "kind": "service", "command": ["${var.BIN}"]}]}`, map[string]string{"BIN": "run"}, "d", "does not start with an absolute, clean path once substituted"},
		// The host manages a command's path as a declared one: not / itself
		// (found by FuzzManifestAcceptedByHost), clean, and so its check's.
		{"ErrCommandRootOnceSubstituted", `{"resources": [{"name": "s", "kind": "service", "command": ["${var.BIN}"]}]}`, map[string]string{"BIN": "/"}, "d", `["/"] does not start with an absolute, clean path`},
		{"ErrCommandUncleanOnceSubstituted", `{"resources": [{"name": "s", "kind": "service", "command": ["/opt/${var.BIN}"]}]}`, map[string]string{"BIN": "../bin/sh"}, "d", `["/opt/../bin/sh"] does not start`},
		{"ErrCheckExecRootOnceSubstituted", `{"resources": [{"name": "s", "kind": "service", "command": ["/opt/run"], "check": {"exec": ["${var.BIN}"]}}]}`, map[string]string{"BIN": "/"}, "d", `check.exec: ["/"] does not start`},
		{"ErrBadManifest", `{"resources": [{"name": "t", "kind": "pkg"}]}`, nil, "d", "module node-tools build 17"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := composeOne(tc.manifest, tc.vars)
			in.Modules[0].Digest = tc.digest
			_, err := ComposePayload(in)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
	t.Run("OK_SetButEmptyVariable", func(t *testing.T) {
		p, err := ComposePayload(composeOne(`{"resources": [{"name": "f", "kind": "file", "path": "/f", "content": "[${var.E}]"}]}`, map[string]string{"E": ""}))
		if err != nil || *p.Resources[0].Content != "[]" {
			t.Fatalf("%v %+v", err, p)
		}
	})
	t.Run("OK_NotAPlaceholder", func(t *testing.T) {
		// Only ${word.key} is a placeholder: shell-like text passes through.
		c := "$HOME ${HOME} $${x} ${var.} ${VAR.x}"
		p, err := ComposePayload(composeOne(`{"resources": [{"name": "f", "kind": "file", "path": "/f", "content": "`+c+`"}]}`, nil))
		if err != nil || *p.Resources[0].Content != c {
			t.Fatalf("%v %q", err, *p.Resources[0].Content)
		}
	})
}

// TestComposePayload_IDsOfTwoModulesCollide: names may hold '.', so
// module a.b's resource c and module a's resource b.c are both a.b.c, and
// a host refuses a declaration that repeats an id.
func TestComposePayload_IDsOfTwoModulesCollide(t *testing.T) {
	_, err := ComposePayload(ComposeInput{Machine: "m", Modules: []ComposeModule{
		{Name: "a.b", Manifest: `{"resources": [{"name": "c", "kind": "file", "path": "/x", "content": ""}]}`},
		{Name: "a", Manifest: `{"resources": [{"name": "b.c", "kind": "file", "path": "/y", "content": ""}]}`},
	}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "a.b.c") {
		t.Fatalf("err = %v, want the repeated id refused", err)
	}
}

// TestComposePayload_PathsOfTwoModulesCollide: two modules' files at one
// path would overwrite each other, and a host refuses them: the
// generation is not composed, saying which two.
func TestComposePayload_PathsOfTwoModulesCollide(t *testing.T) {
	_, err := ComposePayload(ComposeInput{Machine: "m", Modules: []ComposeModule{
		{Name: "a", Manifest: `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": ""}]}`},
		{Name: "b", Manifest: `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/x.conf", "content": ""}]}`},
	}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "resource b.conf declares the path /etc/x.conf, as a.conf does") {
		t.Fatalf("err = %v, want the repeated path refused", err)
	}
}

func TestArtifacts(t *testing.T) {
	d1, d2, h := DigestOf([]byte("1")), DigestOf([]byte("2")), DigestOf([]byte("h"))
	p := &DeclarationPayload{Resources: []Resource{
		{ID: "a.t", Artifact: &Artifact{Digest: d1}}, {ID: "a.f"}, {ID: "b.t", Artifact: &Artifact{Digest: d2}},
	}, Host: &HostRelease{Digest: h}}
	if got := p.Artifacts(); !reflect.DeepEqual(got, []string{d1, d2, h}) {
		t.Fatalf("artifacts = %v", got)
	}
	if got := (&DeclarationPayload{}).Artifacts(); len(got) != 0 {
		t.Fatalf("empty declaration names %v", got)
	}
}

func TestChooseBuild(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pin       *int64
		reason    string
		plan, cur *int64
		back      GoneBack
		running   int64
		want      int64
		ok        bool
	}{
		{"Current", nil, "", nil, i64(5), GoneBack{}, 0, 5, true},
		{"PlanBeforeCurrent", nil, "", i64(6), i64(5), GoneBack{}, 0, 6, true},
		{"PinBeforePlan", i64(4), "", i64(6), i64(5), GoneBack{}, 0, 4, true},
		{"PinNewerThanRunning", i64(9), "", nil, i64(5), GoneBack{}, 7, 9, true},
		{"PinEqualRunning", i64(7), "", nil, nil, GoneBack{}, 7, 7, true},
		{"PinOlderWithoutReason_KeepsRunning", i64(3), "", nil, i64(5), GoneBack{}, 7, 7, true},
		{"PinOlderWithReason_Rollback", i64(3), "bad build", nil, i64(5), GoneBack{}, 7, 3, true},
		{"CurrentOlderThanRunning_KeepsRunning", nil, "", nil, i64(5), GoneBack{}, 8, 8, true},
		{"PlanOlderThanRunning_KeepsRunning", nil, "", i64(6), i64(9), GoneBack{}, 8, 8, true},
		{"ReasonIgnoredWithoutPin", nil, "why", nil, i64(2), GoneBack{}, 8, 8, true},
		{"NothingKnown", nil, "", nil, nil, GoneBack{}, 0, 0, false},
		{"NoCurrent_KeepsRunning", nil, "", nil, nil, GoneBack{}, 4, 4, true},
		{"CurrentOlderWithReason_GoesBack", nil, "", nil, i64(5), GoneBack{"build 8 leaks", 9}, 8, 5, true},
		{"PlanOlderWhenGoneBackFromRunning_GoesToPlan", nil, "", i64(6), i64(5), GoneBack{"back", 9}, 8, 6, true},
		{"PlanOlderNotGoneBackFromRunning_KeepsRunning", nil, "", i64(6), i64(5), GoneBack{"back", 7}, 8, 8, true},
		{"PinOlderWithoutReason_CurrentReasonDoesNotCount", i64(3), "", nil, i64(5), GoneBack{"back", 9}, 7, 7, true},
		{"NewerThanGoneBackFrom_KeepsRunning", nil, "", nil, i64(5), GoneBack{"7 leaks", 7}, 8, 8, true},
		{"GoneBackFromExactly_GoesBack", nil, "", nil, i64(5), GoneBack{"7 leaks", 7}, 7, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ChooseBuild(tc.pin, tc.reason, tc.plan, tc.cur, tc.back, tc.running)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("ChooseBuild = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	// The rule that matters most, over every combination: never older than
	// running unless a person chose it with a reason (a pin, or the current
	// build made current going back).
	t.Run("NeverOlderThanRunning", func(t *testing.T) {
		vals := []*int64{nil, i64(1), i64(5), i64(9)}
		for _, pin := range vals {
			for _, plan := range vals {
				for _, cur := range vals {
					for _, running := range []int64{0, 1, 5, 9} {
						for _, reasons := range [][2]string{{"", ""}, {"r", ""}, {"", "r"}, {"r", "r"}} {
							reason, curReason := reasons[0], reasons[1]
							back := GoneBack{}
							if curReason != "" {
								back = GoneBack{curReason, 9}
							}
							got, ok := ChooseBuild(pin, reason, plan, cur, back, running)
							pinned := pin != nil && reason != "" && *pin == got
							given := cur
							if plan != nil {
								given = plan
							}
							wentBack := pin == nil && given != nil && curReason != "" && running <= 9 && *given == got
							if ok && got < running && !pinned && !wentBack {
								t.Errorf("pin %v reason %q plan %v current %v (%q) running %d: got %d", pin, reason, plan, cur, curReason, running, got)
							}
							if !ok && (pin != nil || plan != nil || cur != nil || running > 0) {
								t.Errorf("pin %v plan %v current %v running %d: no build", pin, plan, cur, running)
							}
						}
					}
				}
			}
		}
	})
}

// TestMarshal_AsJSON: a batch's declarations, composed with the build's
// shared parts (encoded once, spliced in), are byte for byte what
// json.Marshal makes of each composed alone — the digest and signature of
// a declaration never depend on how it was encoded.
func TestMarshal_AsJSON(t *testing.T) {
	man := `{"resources": [
		{"name": "runtime", "kind": "tree", "path": "/opt/node-tools"},
		{"name": "static", "kind": "file", "path": "/etc/static.conf", "content": "a <b> & \"c\" \u2028 é\n", "mode": "0600"},
		{"name": "config", "kind": "file", "path": "/etc/${machine.name}.conf", "content": "port=${var.PORT}\n"},
		{"name": "unit", "kind": "service", "command": ["/opt/node-tools/bin/run", "--x"], "env": {"B": "2", "A": "1"},
		 "after": ["runtime", "static"], "check": {"http": "http://127.0.0.1/<h>?a&b", "status": 200}},
		{"name": "agent", "kind": "service", "command": ["/opt/node-tools/bin/agent", "${machine.name}"], "env": {"P": "${var.PORT}"}}
	]}`
	parsed, err := ParseManifest([]byte(man))
	if err != nil {
		t.Fatal(err)
	}
	shared := NewSharedParts(parsed)
	for i, machine := range []string{"m1", "m2", "m3"} {
		in := composeOne(man, map[string]string{"PORT": fmt.Sprint(9000 + i)})
		in.Machine = machine
		alone, err := ComposePayload(in)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(alone)
		if err != nil {
			t.Fatal(err)
		}
		in.Modules[0].Parsed, in.Modules[0].Shared = parsed, shared
		p, got := marshalled(t, in)
		if !bytes.Equal(got, want) {
			t.Fatalf("machine %s: spliced\n%s\nwant\n%s", machine, got, want)
		}
		if n := spliced(p); n != 3 {
			t.Fatalf("machine %s: %d resources spliced, want the 3 without a placeholder", machine, n)
		}
	}
	// A payload held back takes an older declaration's resources, decoded:
	// they carry no encoding, so they are encoded again, not spliced.
	in := composeOne(man, map[string]string{"PORT": "1"})
	in.Modules[0].Parsed, in.Modules[0].Shared = parsed, shared
	_, b := marshalled(t, in)
	var back DeclarationPayload
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if spliced(&back) != 0 {
		t.Fatal("a decoded resource carries encoded bytes")
	}
}

// spliced counts p's resources that carry their encoding.
func spliced(p *DeclarationPayload) int {
	n := 0
	for _, r := range p.Resources {
		if r.raw != nil {
			n++
		}
	}
	return n
}

// SharedParts given beside another manifest than the one it was made for
// (the same number of resources, other content) is not used: the machine
// gets its own manifest's resources.
func TestComposePayload_SharedPartsOfAnotherManifest(t *testing.T) {
	manA := `{"resources": [{"name": "f", "kind": "file", "path": "/etc/a", "content": "a"}]}`
	a, err := ParseManifest([]byte(manA))
	if err != nil {
		t.Fatal(err)
	}
	b := `{"resources": [{"name": "f", "kind": "file", "path": "/etc/b", "content": "b"}]}`
	parsedB, err := ParseManifest([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	shared := NewSharedParts(a)
	in := composeOne(manA, nil)
	in.Modules[0].Parsed, in.Modules[0].Shared = a, shared
	if _, err := ComposePayload(in); err != nil { // fills shared with a's resource
		t.Fatal(err)
	}
	in.Modules[0].Manifest, in.Modules[0].Parsed = b, parsedB
	p, got := marshalled(t, in)
	if p.Resources[0].Path != "/etc/b" || !bytes.Contains(got, []byte(`"/etc/b"`)) || bytes.Contains(got, []byte(`"/etc/a"`)) {
		t.Fatalf("composed from the other manifest's parts: %s", got)
	}
}

// marshalled composes in and encodes it as composing does (Marshal).
func marshalled(t *testing.T, in ComposeInput) (*DeclarationPayload, []byte) {
	t.Helper()
	p, err := ComposePayload(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}
