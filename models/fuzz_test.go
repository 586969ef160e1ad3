package models

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseManifest feeds ParseManifest arbitrary bytes (a manifest comes
// from a builder's upload). What it accepts must hold the rules it claims,
// survive a round trip through JSON, and compose without a panic.
func FuzzParseManifest(f *testing.F) {
	for _, s := range []string{
		`{"resources": []}`,
		`{"resources": [{"name": "runtime", "kind": "tree", "path": "/opt/node-tools"},
		 {"name": "config", "kind": "file", "path": "/etc/node-tools.conf", "content": "port=${var.PORT}\n", "mode": "0644"},
		 {"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run", "${machine.name}"], "after": ["runtime", "config"],
		  "env": {"A": "${var.A}"}, "check": {"tcp": "127.0.0.1:9000"}, "on_remove": "forget"}]}`,
		`{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"http": "http://x", "status": 200}}]}`,
		`{"resources": [{"name": "t", "kind": "tree", "path": "/t", "artifact": {"digest": "sha256:00", "size": 1, "url": "/u"}}]}`,
		`{"resources": [{"name": "a", "kind": "tree", "path": "/a", "after": ["a"]}]}`,
		`{"resources": null}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if m != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("refusal %v (manifest %v) is not a plain ErrInvalid", err, m)
			}
			return
		}
		if m.Resources == nil {
			t.Fatal("accepted a manifest with nil resources")
		}
		names := map[string]bool{}
		for _, r := range m.Resources {
			if ValidName("n", r.Name) != nil || names[r.Name] {
				t.Fatalf("accepted name %q (bad or repeated)", r.Name)
			}
			names[r.Name] = true
			switch r.Kind {
			case "file", "tree":
				if !strings.HasPrefix(r.Path, "/") || strings.Contains(r.Path, "..") {
					t.Fatalf("accepted path %q", r.Path)
				}
			case "service":
				if len(r.Command) == 0 {
					t.Fatal("accepted a service without a command")
				}
			default:
				t.Fatalf("accepted kind %q", r.Kind)
			}
			if r.Kind == "file" && r.Content == nil {
				t.Fatal("accepted a file without content")
			}
		}
		for _, r := range m.Resources {
			for _, a := range r.After {
				if !names[a] {
					t.Fatalf("accepted after %q, not a resource", a)
				}
			}
		}
		// Round trip: what it accepted marshals to a manifest it accepts
		// again, the same.
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(again)
		if err != nil {
			t.Fatalf("its own output refused: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normManifest(m), normManifest(m2)) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
		// Composing it must not panic, and the ids it gives are the module's.
		vars := map[string]string{"A": "a", "PORT": "1"}
		p, err := ComposePayload(ComposeInput{Machine: "m1", Generation: 1, Variables: vars,
			Modules: []ComposeModule{{Name: "mod", Build: 1, Digest: DigestOf(b), Parsed: m}}})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("compose: %v is not ErrInvalid", err)
			}
			return
		}
		if len(p.Resources) != len(m.Resources) {
			t.Fatalf("composed %d resources of %d", len(p.Resources), len(m.Resources))
		}
		for i, r := range p.Resources {
			if r.ID != "mod."+m.Resources[i].Name || (r.Kind == "tree" && r.Artifact == nil) {
				t.Fatalf("composed %+v", r)
			}
		}
		// Composed for two machines with the build's shared parts, each
		// declaration is the bytes json.Marshal makes of it composed alone.
		shared := NewSharedParts(m)
		for _, machine := range []string{"m1", "m2"} {
			in := ComposeInput{Machine: machine, Generation: 1, Variables: vars,
				Modules: []ComposeModule{{Name: "mod", Build: 1, Digest: DigestOf(b), Manifest: string(b)}}}
			alone, err := ComposePayload(in)
			if err != nil {
				t.Fatalf("composed once, then refused: %v", err)
			}
			want, err := json.Marshal(alone)
			if err != nil {
				t.Fatal(err)
			}
			in.Modules[0].Parsed, in.Modules[0].Shared = m, shared
			sp, err := ComposePayload(in)
			if err != nil {
				t.Fatalf("composed alone, refused with shared parts: %v", err)
			}
			got, err := sp.Marshal()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("machine %s: shared parts gave (%v)\n%s\nalone\n%s", machine, err, got, want)
			}
		}
	})
}

// normManifest makes empty and nil collections alike: omitempty drops both.
func normManifest(m *Manifest) *Manifest {
	out := &Manifest{Resources: []ManifestResource{}}
	for _, r := range m.Resources {
		if len(r.Command) == 0 {
			r.Command = nil
		}
		if len(r.Env) == 0 {
			r.Env = nil
		}
		if len(r.After) == 0 {
			r.After = nil
		}
		if r.Check != nil {
			c := *r.Check
			if len(c.Exec) == 0 {
				c.Exec = nil
			}
			r.Check = &c
		}
		out.Resources = append(out.Resources, r)
	}
	return out
}

// FuzzDecodeReport feeds DecodeReport arbitrary bodies (a report comes
// from a host, which may be compromised). What it accepts has a known
// outcome, a generation, and logs within their bounds that a terminal can
// show as they are; it survives a round trip; what it refuses is a plain
// ErrInvalid.
func FuzzDecodeReport(f *testing.F) {
	for _, s := range []string{
		`{"send": "", "generation": 0, "outcome": "refused", "reason": "not verified"}`,
		`{"send": "s", "generation": 3, "outcome": "applied", "checks": [{"resource": "a.s", "ok": false, "at": "2026-01-01T00:00:00Z"}],
		  "logs": [{"resource": "a.s", "why": "unhealthy", "lines": ["listen tcp: address already in use", "\tat main"], "truncated": true}]}`,
		`{"generation": 3, "outcome": "checked", "logs": [{"resource": "a.s", "why": "restarted", "lines": []}, {"resource": "a.t", "why": "failed", "lines": null}]}`,
		`{"generation": 3, "outcome": "checked", "logs": [{"resource": "a.s", "why": "restarted", "lines": ["\u001b[2J"]}]}`,
		`{"generation": 3, "outcome": "checked", "logs": [{"resource": "a.s", "why": "restarted", "lines": ["\u0000"]}]}`,
		`{"generation": 3, "outcome": "checked", "logs": [{"resource": "../x", "why": "restarted"}]}`,
		`{"generation": 3, "outcome": "checked", "logs": [{"resource": "a.s", "why": "bored"}]}`,
		`{"generation": 3, "outcome": "checked", "logs": {"resource": "a.s"}}`,
		`{"generation": 3, "outcome": "checked", "logs": null}`,
		`{"outcome": "failed", "generation": -1}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeReport(b)
		if err != nil {
			if r != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("refusal %v (report %v) is not a plain ErrInvalid", err, r)
			}
			return
		}
		if !ValidOutcome(r.Outcome) || r.Generation < 0 {
			t.Fatalf("accepted outcome %q, generation %d", r.Outcome, r.Generation)
		}
		if len(r.Logs) > MaxLogServices {
			t.Fatalf("accepted logs of %d services", len(r.Logs))
		}
		for _, l := range r.Logs {
			size := 0
			for _, line := range l.Lines {
				size += len(line) + 1
				if strings.ContainsAny(line, "\n\r\x00\x1b") || EscapeLogLine(line, MaxLogBytes) != line {
					t.Fatalf("accepted a line a terminal would act on: %q", line)
				}
			}
			if len(l.Lines) > MaxLogLines || size > MaxLogBytes || ValidResourceID(l.Resource) != nil {
				t.Fatalf("accepted logs out of bounds: %q, %d lines, %d bytes", l.Resource, len(l.Lines), size)
			}
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeReport(again); err != nil {
			t.Fatalf("its own output refused: %v\n%s", err, again)
		}
	})
}

// FuzzParseSchemas: an advertised schema list is hostile input on every
// poll. Whatever it holds, parsing never panics, and what it accepts is
// ascending without repeats, within bounds, and reads back the same from
// its canonical form.
func FuzzParseSchemas(f *testing.F) {
	for _, s := range []string{"", "1", "1,2", " 2 , 1 ", "1,,2", "0", "999", "1000", "2,2", "-1", "1;2", strings.Repeat("1,", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSchemas(s)
		if err != nil {
			return
		}
		if len(got) == 0 {
			t.Fatalf("%q: accepted as no schema at all", s)
		}
		for i, n := range got {
			if n < 1 || n > 999 || (i > 0 && n <= got[i-1]) {
				t.Fatalf("%q: accepted as %v", s, got)
			}
		}
		again, err := ParseSchemas(got.String())
		if err != nil || again.String() != got.String() {
			t.Fatalf("%q → %q → %v, %v", s, got.String(), again, err)
		}
	})
}

// FuzzParseSelector: a selector comes from an operator, but it is parsed on
// every label and module write. Parsing never panics, and an accepted one
// reads back to the same selector from its own words.
func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"", "role=web", "role=web,zone!=b", "!gpu", "gpu", "a=b=c", "role=", "=web", ",,", "k!=", "ROLE=web", "role = web , zone != b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sel, err := ParseSelector(s)
		if err != nil {
			return
		}
		again, err := ParseSelector(sel.String())
		if err != nil || again.String() != sel.String() {
			t.Fatalf("%q → %q → %q, %v", s, sel.String(), again.String(), err)
		}
		_ = sel.Matches(map[string]string{"role": "web"})
	})
}

// FuzzExpandPlaceholders holds the hand-written scan that substitutes a
// manifest's placeholders to placeholderRE's own replacement: the same
// result, and the same placeholder, scope and name given for each match.
func FuzzExpandPlaceholders(f *testing.F) {
	for _, s := range []string{"", "plain", "${machine.name}", "a${var.PORT}b${var.x-y.z}c", "$${var.a}}", "${var.}", "${.a}",
		"${Var.a}", "${var.a", "${var.a${var.b}}", "${x.y}${", "\u00e9${var.\u00e9}${var.a_b}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var got, want []string
		out := expandPlaceholders(s, func(ph, scope, name string) string {
			got = append(got, ph, scope, name)
			return "<" + name + ">"
		})
		ref := placeholderRE.ReplaceAllStringFunc(s, func(ph string) string {
			m := placeholderRE.FindStringSubmatch(ph)
			want = append(want, m...)
			return "<" + m[2] + ">"
		})
		if out != ref || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: the scan gives %q (matches %q), the expression %q (matches %q)", s, out, got, ref, want)
		}
	})
}
