package models

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSchemas(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Schemas
		err      string // a part of the refusal; "" means accepted
	}{
		{"OK_One", "1", Schemas{1}, ""},
		{"OK_Two", "1,2", Schemas{1, 2}, ""},
		{"OK_Unordered", " 2 , 1 ", Schemas{1, 2}, ""},
		{"OK_OnlyTwo", "2", Schemas{2}, ""},
		{"OK_AbsentIsOne", "", Schemas{1}, ""},
		{"ErrWord", "one", nil, `"one" is not a schema number`},
		{"ErrEmptyItem", "1,,2", nil, `"" is not a schema number`},
		{"ErrTrailingComma", "1,", nil, `"" is not a schema number`},
		{"ErrSigned", "+1", nil, `"+1" is not a schema number`},
		{"ErrNegative", "-1", nil, `"-1" is not a schema number`},
		{"ErrLeadingZero", "01", nil, `"01" is not a schema number`},
		{"ErrZero", "0", nil, "schema 0 is outside 1..999"},
		{"ErrHuge", "1000", nil, "schema 1000 is outside 1..999"},
		{"ErrRepeat", "1,2,1", nil, "schema 1 is listed twice"},
		{"ErrTooMany", "1,2,3,4,5,6,7,8,9", nil, "9 schemas listed, at most 8"},
		{"ErrTooLong", strings.Repeat(" ", 65), nil, "65 bytes, at most 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSchemas(tc.in)
			if tc.err == "" {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("= %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Field != "X-Mesh-Schema" || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want an InvalidError of X-Mesh-Schema saying %q", err, tc.err)
			}
		})
	}
}

func TestSchemas_PickAndString(t *testing.T) {
	for _, tc := range []struct {
		name   string
		host   Schemas
		need   int
		want   int
		wantOK bool
	}{
		{"OneHost_OneContent", Schemas{1}, 1, 1, true},
		{"TwoHost_OneContent_StaysOne", Schemas{1, 2}, 1, 1, true},
		{"TwoHost_TwoContent", Schemas{1, 2}, 2, 2, true},
		{"OnlyTwoHost_OneContent_SentAsTwo", Schemas{2}, 1, 2, true},
		{"OneHost_TwoContent_HeldBack", Schemas{1}, 2, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.host.Pick(tc.need)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("Pick(%d) = %d, %v; want %d, %v", tc.need, got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if s := (Schemas{1, 2}).String(); s != "1,2" {
		t.Fatalf("String = %q", s)
	}
	if s := SchemasOf("garbage"); !reflect.DeepEqual(s, Schemas{1}) {
		t.Fatalf("SchemasOf(garbage) = %v, want schema 1", s)
	}
}

func TestNeededSchema(t *testing.T) {
	content := "x"
	for _, tc := range []struct {
		name string
		rs   []Resource
		want int
	}{
		{"None", nil, 1},
		{"FileTreeService", []Resource{{Kind: "file", Content: &content}, {Kind: "tree"}, {Kind: "service", Check: &Check{TCP: "a:1"}}}, 1},
		{"Certificate", []Resource{{Kind: "file", Content: &content}, {Kind: ResourceCertificate, Names: []string{"a.mesh"}}}, 2},
		{"TLSCheck", []Resource{{Kind: "service", Check: &Check{TLS: "a:443", ServerName: "a.mesh"}}}, 2},
		// A schema-2 field on a schema-1 kind still needs a host that
		// knows the field: it would be refused, whole, by a schema-1 host.
		{"CertificateFieldOnFile", []Resource{{Kind: "file", Content: &content, Owner: "root"}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NeededSchema(tc.rs); got != tc.want {
				t.Fatalf("NeededSchema = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestHeldBack_Reason(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    HeldBack
		want string
	}{
		{"WithRelease", HeldBack{Need: 2, HostVersion: "1.4.0", Host: Schemas{1}, Release: "1.5.0", ReleaseSchemas: Schemas{1, 2}},
			"held back: needs host schema 2; host 1.4.0 decodes 1; release 1.5.0 decodes 1,2"},
		{"NoRelease", HeldBack{Need: 2, HostVersion: "1.4.0", Host: Schemas{1}},
			"held back: needs host schema 2; host 1.4.0 decodes 1; no host release known to decode it"},
		{"NoVersion", HeldBack{Need: 2, Host: Schemas{1}},
			"held back: needs host schema 2; host (version unknown) decodes 1; no host release known to decode it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.h.Reason(); got != tc.want {
				t.Fatalf("Reason =\n %q\nwant\n %q", got, tc.want)
			}
		})
	}
}

func TestParseManifest_Schema2(t *testing.T) {
	cert := func(extra string) string {
		return `{"resources": [{"name": "web", "kind": "service", "command": ["/bin/web"]},
			{"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh", "web.mesh"],
			 "path": "/etc/web/chain.pem", "key_path": "/etc/web/key.pem"` + extra + `}]}`
	}
	for _, tc := range []struct {
		name, in, field string
	}{
		{"OK_Certificate", cert(`, "mode": "0640", "owner": "web:web", "lifetime": "720h", "on_renew": [{"service": "web", "signal": "HUP"}]`), ""},
		{"OK_CertificateRestart", cert(`, "on_renew": [{"service": "web"}]`), ""},
		{"OK_TLSCheck", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"tls": "${var.PEER}:8443", "server_name": "web.${var.PEER}.mesh"}}]}`, ""},
		{"ErrNoNames", `{"resources": [{"name": "c", "kind": "certificate", "path": "/etc/c.pem", "key_path": "/etc/k.pem"}]}`, "manifest.resources[0].names"},
		{"ErrWildcard", `{"resources": [{"name": "c", "kind": "certificate", "names": ["*.mesh"], "path": "/etc/c.pem", "key_path": "/etc/k.pem"}]}`, "manifest.resources[0].names[0]"},
		{"ErrUpperName", `{"resources": [{"name": "c", "kind": "certificate", "names": ["Web.mesh"], "path": "/etc/c.pem", "key_path": "/etc/k.pem"}]}`, "manifest.resources[0].names[0]"},
		{"ErrChainRelative", `{"resources": [{"name": "c", "kind": "certificate", "names": ["a.mesh"], "path": "etc/c.pem", "key_path": "/etc/k.pem"}]}`, "manifest.resources[0].path"},
		{"ErrKeyDotDot", `{"resources": [{"name": "c", "kind": "certificate", "names": ["a.mesh"], "path": "/etc/c.pem", "key_path": "/etc/../k.pem"}]}`, "manifest.resources[0].key_path"},
		{"ErrKeyIsChain", `{"resources": [{"name": "c", "kind": "certificate", "names": ["a.mesh"], "path": "/etc/c.pem", "key_path": "/etc/c.pem"}]}`, "manifest.resources[0].key_path"},
		{"ErrMode", cert(`, "mode": "600"`), "manifest.resources[1].mode"},
		{"ErrOwner", cert(`, "owner": "Web User"`), "manifest.resources[1].owner"},
		{"ErrLifetimeWord", cert(`, "lifetime": "a month"`), "manifest.resources[1].lifetime"},
		{"ErrLifetimeShort", cert(`, "lifetime": "1s"`), "manifest.resources[1].lifetime"},
		{"ErrOnRenewUnknown", cert(`, "on_renew": [{"service": "db"}]`), "manifest.resources[1].on_renew[0].service"},
		{"ErrOnRenewNotService", cert(`, "on_renew": [{"service": "cert"}]`), "manifest.resources[1].on_renew[0].service"},
		{"ErrOnRenewSignal", cert(`, "on_renew": [{"service": "web", "signal": "KILL"}]`), "manifest.resources[1].on_renew[0].signal"},
		{"ErrCertificateContent", cert(`, "content": "x"`), "manifest.resources[1]"},
		{"ErrNamesOnFile", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/f", "content": "", "names": ["a.mesh"]}]}`, "manifest.resources[0]"},
		{"ErrTLSNoServerName", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"tls": "a:1"}}]}`, "manifest.resources[0].check.server_name"},
		{"ErrTLSNoPort", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"tls": "a", "server_name": "a.mesh"}}]}`, "manifest.resources[0].check.tls"},
		{"ErrTLSAndTCP", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"tls": "a:1", "tcp": "a:1", "server_name": "a.mesh"}}]}`, "manifest.resources[0].check"},
		{"ErrServerNameAlone", `{"resources": [{"name": "s", "kind": "service", "command": ["/s"], "check": {"tcp": "a:1", "server_name": "a.mesh"}}]}`, "manifest.resources[0].check.server_name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tc.in))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Field != tc.field {
				t.Fatalf("err = %v, want an InvalidError of %s", err, tc.field)
			}
		})
	}
}

func TestComposePayload_Schema2(t *testing.T) {
	man := `{"resources": [{"name": "web", "kind": "service", "command": ["/bin/web"],
		"check": {"tls": "${var.PEER}:8443", "server_name": "web.${var.PEER}.mesh"}},
		{"name": "cert", "kind": "certificate", "names": ["web.${machine.name}.mesh"], "path": "/etc/web/chain.pem",
		 "key_path": "/etc/web/${machine.name}.key", "lifetime": "1h", "on_renew": [{"service": "web", "signal": "HUP"}]}]}`
	p, err := ComposePayload(composeOne(man, map[string]string{"PEER": "m2"}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Schema != SchemaV2 {
		t.Fatalf("schema = %d, want 2 for a certificate", p.Schema)
	}
	c := p.Resources[1]
	if c.ID != "node-tools.cert" || !reflect.DeepEqual(c.Names, []string{"web.m1.mesh"}) || c.KeyPath != "/etc/web/m1.key" ||
		!reflect.DeepEqual(c.OnRenew, []OnRenew{{Service: "node-tools.web", Signal: "HUP"}}) {
		t.Fatalf("certificate = %+v", c)
	}
	if w := p.Resources[0]; w.Check.TLS != "m2:8443" || w.Check.ServerName != "web.m2.mesh" {
		t.Fatalf("tls check = %+v", w.Check)
	}
	t.Run("ErrNameBadOnceSubstituted", func(t *testing.T) {
		_, err := ComposePayload(composeOne(strings.ReplaceAll(man, "PEER", "X"), map[string]string{"X": "M_2"}))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "once substituted") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("Schema1BytesHaveNoSchema2Keys", func(t *testing.T) {
		p, err := ComposePayload(goldenInput())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(p)
		for _, k := range []string{"names", "key_path", "owner", "lifetime", "on_renew", "tls", "server_name"} {
			if strings.Contains(string(b), `"`+k+`"`) {
				t.Fatalf("schema-1 payload carries %q: %s", k, b)
			}
		}
	})
}

func TestRenewAt_TwoThirds(t *testing.T) {
	nb := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if got := RenewAt(nb.Add(3*time.Hour), 3*time.Hour); !got.Equal(nb.Add(2 * time.Hour)) {
		t.Fatalf("RenewAt = %v", got)
	}
}

// TestHoldBack: a held-back declaration carries desired's header around
// the newest applied content the host can express, whole. A host rolled
// back past content it applied (TestHoldBack/RolledBackPastApplied pins
// the failure: that machine's compose failed and it was sent nothing) is
// sent the applied content before it.
func TestHoldBack(t *testing.T) {
	content := "x"
	file := Resource{ID: "a.f", Kind: "file", Path: "/etc/f", Content: &content}
	other := Resource{ID: "a.g", Kind: "file", Path: "/etc/g", Content: &content}
	cert := Resource{ID: "b.c", Kind: ResourceCertificate, Names: []string{"b.mesh"}, Path: "/etc/c", KeyPath: "/etc/k"}
	host := &HostRelease{Version: "1.5.0"}
	desired := &DeclarationPayload{Schema: 2, Machine: "m1", Generation: 9, ComposedBy: "ctl", Host: host,
		Resources: []Resource{file, cert}}
	gen := func(g int64, empty bool, rs ...Resource) *DeclarationPayload {
		return &DeclarationPayload{Schema: NeededSchema(rs), Machine: "m1", Generation: g, Resources: rs, EmptyOK: empty}
	}
	for _, tc := range []struct {
		name       string
		applied    []*DeclarationPayload
		appliedGen int64
		host       Schemas
		want       []Resource
		wantEmpty  bool
		from       int64
		err        string
	}{
		{name: "AppliedContentAndNewHostTarget", applied: []*DeclarationPayload{gen(7, false, file)}, appliedGen: 7, host: Schemas{1},
			want: []Resource{file}, from: 7},
		{name: "NothingAppliedYet", host: Schemas{1}, want: []Resource{}},
		{name: "RolledBackPastApplied", applied: []*DeclarationPayload{gen(8, false, file, cert), gen(6, false, other), gen(5, false, file)},
			appliedGen: 8, host: Schemas{1}, want: []Resource{other}, from: 6},
		{name: "RolledBackToEmptyOK", applied: []*DeclarationPayload{gen(8, false, cert), gen(4, true)},
			appliedGen: 8, host: Schemas{1}, want: []Resource{}, wantEmpty: true, from: 4},
		// What the machine ran before the trial was nothing: going back
		// to it says empty_ok, or the host refuses it while the trial's
		// resources run.
		{name: "RolledBackToNothing", applied: []*DeclarationPayload{gen(8, false, file, cert), gen(4, false)},
			appliedGen: 8, host: Schemas{1}, want: []Resource{}, wantEmpty: true, from: 4},
		{name: "LastAppliedNothing", applied: []*DeclarationPayload{gen(4, false)}, appliedGen: 4, host: Schemas{1},
			want: []Resource{}, from: 4},
		{name: "ErrNoneExpressible", applied: []*DeclarationPayload{gen(8, false, file, cert), gen(7, false, cert)}, appliedGen: 8, host: Schemas{1},
			err: "machine m1: the content of generation 8, which it applied last, needs schema 2, its host decodes 1, and no earlier declaration it applied that its host decodes is on record"},
		{name: "ErrLastAppliedNotOnRecord", applied: []*DeclarationPayload{gen(6, false, file)}, appliedGen: 8, host: Schemas{1},
			err: "machine m1: the declaration of generation 8, which it applied last, is not on record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, from, err := HoldBack(desired, tc.applied, tc.appliedGen, tc.host)
			if tc.err != "" {
				if !errors.Is(err, ErrInvalid) || !strings.HasSuffix(err.Error(), tc.err) {
					t.Fatalf("err = %v\nwant …%s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Schema != 1 || p.Generation != 9 || p.Host != host || p.ComposedBy != "ctl" || from != tc.from ||
				p.EmptyOK != tc.wantEmpty || p.Resources == nil || !reflect.DeepEqual(p.Resources, tc.want) {
				t.Fatalf("held back = %+v from %d; want %v from %d", p, from, tc.want, tc.from)
			}
			if len(desired.Resources) != 2 || desired.Schema != 2 {
				t.Fatal("desired changed")
			}
		})
	}
}

func TestHeldBack_ReasonRolledBack(t *testing.T) {
	h := HeldBack{Need: 2, HostVersion: "0.9.0", Host: Schemas{1}, Release: "2.0.0", ReleaseSchemas: Schemas{1, 2}, From: 6, Applied: 8}
	want := "held back: needs host schema 2; host 0.9.0 decodes 1; release 2.0.0 decodes 1,2; sent the content of generation 6, the newest it applied that its host decodes (generation 8, applied last, is past it)"
	if got := h.Reason(); got != want {
		t.Fatalf("reason = %q\nwant     %q", got, want)
	}
	h.From = 8
	if got := h.Reason(); got != "held back: needs host schema 2; host 0.9.0 decodes 1; release 2.0.0 decodes 1,2" {
		t.Fatalf("reason of the last applied content = %q", got)
	}
}

func TestCheckCertificateGrant(t *testing.T) {
	p := &DeclarationPayload{Machine: "m1", Resources: []Resource{
		{ID: "web.cert", Kind: ResourceCertificate, Names: []string{"web.m1.mesh", "web.mesh"}, Lifetime: "1h"},
		{ID: "web.svc", Kind: "service"}}}
	for _, tc := range []struct {
		name       string
		gen, appl  int64
		id         string
		asked      []string
		want       error
		wantDetail string
	}{
		{"OK", 5, 5, "web.cert", []string{"web.mesh", "web.m1.mesh"}, nil, ""},
		{"OK_ApplyingNewer", 6, 5, "web.cert", []string{"web.m1.mesh", "web.mesh"}, nil, ""},
		{"ErrAnotherMachinesName", 5, 5, "web.cert", []string{"web.m1.mesh", "web.m2.mesh"}, ErrForbidden, `not given the name "web.m2.mesh"`},
		{"ErrNotACertificate", 5, 5, "web.svc", []string{"web.mesh"}, ErrForbidden, "declares no certificate web.svc"},
		{"ErrOlderSend", 4, 5, "web.cert", []string{"web.mesh"}, ErrForbidden, "older than generation 5"},
		{"ErrSomeNames", 5, 5, "web.cert", []string{"web.mesh"}, ErrInvalid, "asks for 1 of its 2 names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := CheckCertificateGrant(p, tc.gen, tc.appl, tc.id, tc.asked)
			if tc.want == nil {
				if err != nil || d != time.Hour {
					t.Fatalf("= %v, %v", d, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantDetail) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.wantDetail)
			}
		})
	}
}
