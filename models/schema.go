package models

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SchemaV2 adds the `certificate` resource kind and the `tls` check kind.
// Everything schema 1 says, schema 2 says in the same bytes.
const SchemaV2 = 2

// SchemaLatest is the newest declaration schema this code composes and decodes.
const SchemaLatest = SchemaV2

// Bounds of an advertised schema list (X-Mesh-Schema): a host decodes a
// handful of schemas, so a long list is nonsense, not a wish.
const (
	maxSchemaHeader = 64
	maxSchemas      = 8
	maxSchemaNumber = 999
)

// Schemas is the set of declaration schemas a host decodes, ascending and
// without repeats: what its poll advertises.
type Schemas []int

// ParseSchemas reads an advertised list ("1", "1,2", " 2 , 1 "). Absent
// ("") means schema 1 only: hosts older than the header decoded nothing
// else. Every refusal names what was wrong.
func ParseSchemas(s string) (Schemas, error) {
	return parseSchemas("X-Mesh-Schema", s)
}

// ParseEnrolSchemas reads the list a host gives with its enrolment, as
// a poll's header: absent is schema 1.
func ParseEnrolSchemas(s string) (Schemas, error) {
	return parseSchemas("schema", s)
}

// ParseReleaseSchemas reads the schemas a host release decodes, given with
// its upload or its builder's host build. Required, unlike a poll's
// header: a release that does not say is not assumed to decode anything,
// and one that decodes none of the schemas this controller composes could
// never be sent a declaration.
func ParseReleaseSchemas(s string) (Schemas, error) {
	const field = "schemas"
	if strings.TrimSpace(s) == "" {
		return nil, Invalid(field, "required: the declaration schemas the host release decodes, like 1,2")
	}
	out, err := parseSchemas(field, s)
	if err != nil {
		return nil, err
	}
	if out[0] > SchemaLatest {
		return nil, Invalid(field, fmt.Sprintf("%s decodes none of the schemas this controller composes (1..%d)", out, SchemaLatest))
	}
	return out, nil
}

func parseSchemas(field, s string) (Schemas, error) {
	if len(s) > maxSchemaHeader {
		return nil, Invalid(field, fmt.Sprintf("%d bytes, at most %d", len(s), maxSchemaHeader))
	}
	if strings.TrimSpace(s) == "" {
		return Schemas{SchemaV1}, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxSchemas {
		return nil, Invalid(field, fmt.Sprintf("%d schemas listed, at most %d", len(parts), maxSchemas))
	}
	out := make(Schemas, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		n, err := strconv.Atoi(p)
		if err != nil || p == "" || p[0] == '+' || p[0] == '-' || (len(p) > 1 && p[0] == '0') {
			return nil, Invalid(field, fmt.Sprintf("%q is not a schema number (comma-separated positive integers like 1,2)", p))
		}
		if n < 1 || n > maxSchemaNumber {
			return nil, Invalid(field, fmt.Sprintf("schema %d is outside 1..%d", n, maxSchemaNumber))
		}
		if slices.Contains(out, n) {
			return nil, Invalid(field, fmt.Sprintf("schema %d is listed twice", n))
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// String is the canonical list ("1,2"), the form stored on the machine: two
// polls that advertise the same set in another order are one set.
func (s Schemas) String() string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// Has says whether s holds schema n.
func (s Schemas) Has(n int) bool {
	for _, m := range s {
		if m == n {
			return true
		}
	}
	return false
}

// Max is the newest schema in s (0 when empty).
func (s Schemas) Max() int {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// Pick is the schema a declaration whose content needs `need` is composed
// in for a host that decodes s: the lowest advertised schema at least
// need, so a schema-1 declaration stays schema 1 wherever it can. False
// when the host decodes nothing that expresses the content. A schema past
// SchemaLatest is never picked: this controller cannot say what its bytes
// mean, so a host decoding only later schemas is held back, not sent
// content labelled with a schema it was not composed in.
func (s Schemas) Pick(need int) (int, bool) {
	for _, n := range s {
		if n >= need && n <= SchemaLatest {
			return n, true
		}
	}
	return 0, false
}

// ExpressesAll says whether a host that decodes s can be sent whatever
// this controller composes: a schema it decodes expresses the latest
// content. One that cannot (it decodes only schema 1, or 1 and a later 3
// with 2 retired, or only schemas past this controller's) may be held
// back, and composing it reads what that needs.
func (s Schemas) ExpressesAll() bool {
	_, ok := s.Pick(SchemaLatest)
	return ok
}

// SchemasOf reads a stored list; one that does not parse (never stored by
// this code) is schema 1, the safe reading.
func SchemasOf(stored string) Schemas {
	s, err := ParseSchemas(stored)
	if err != nil {
		return Schemas{SchemaV1}
	}
	return s
}

// ResourceSchema is the lowest schema that expresses r: 2 for a
// certificate or a tls check, else 1.
func ResourceSchema(r *Resource) int {
	if r.Kind == ResourceCertificate || r.Names != nil || r.KeyPath != "" || r.Owner != "" || r.Lifetime != "" || r.OnRenew != nil {
		return SchemaV2
	}
	if r.Check != nil && (r.Check.TLS != "" || r.Check.ServerName != "") {
		return SchemaV2
	}
	return SchemaV1
}

// NeededSchema is the lowest schema that expresses every resource of rs.
func NeededSchema(rs []Resource) int {
	need := SchemaV1
	for i := range rs {
		need = max(need, ResourceSchema(&rs[i]))
	}
	return need
}

// TrialSchemas is why the trial of host release version fails when its
// poll advertises the schemas got while the release records want: a
// release that says one thing and a binary that decodes another would
// have the controller send a schema the host cannot read, or hold back
// content it can. "" when they agree.
func TrialSchemas(version string, want, got Schemas) string {
	if want.String() == got.String() {
		return ""
	}
	return fmt.Sprintf("its trial poll advertised schemas %s; release %s records %s", got, version, want)
}

// HeldBack is why a machine's declaration was composed from held-back
// content: the schema its desired content needs, and the host that cannot
// decode it. Release, when known, is a host release that decodes Need.
// From is the generation whose applied content it carries when that is
// not Applied, the last the machine applied (the host was rolled back past
// content it had applied; see HoldBack).
type HeldBack struct {
	Need           int
	HostVersion    string
	Host           Schemas
	Release        string
	ReleaseSchemas Schemas
	From, Applied  int64
}

// Reason is the words every view shows: "held back: needs host schema 2;
// host 1.4.0 decodes 1; release 1.5.0 decodes 2", and, for a host rolled
// back past content it had applied, which content it is sent instead.
func (h HeldBack) Reason() string {
	hv := h.HostVersion
	if hv == "" {
		hv = "(version unknown)"
	}
	s := fmt.Sprintf("held back: needs host schema %d; host %s decodes %s", h.Need, hv, h.Host)
	if h.Release != "" {
		s += fmt.Sprintf("; release %s decodes %s", h.Release, h.ReleaseSchemas)
	} else {
		s += "; no host release known to decode it"
	}
	if len(h.Host) > 0 && h.Host[0] > SchemaLatest {
		s += fmt.Sprintf("; this controller composes schemas 1..%d, so the host needs a newer controller", SchemaLatest)
	}
	if h.From != 0 && h.From != h.Applied {
		s += fmt.Sprintf("; sent the content of generation %d, the newest it applied that its host decodes (generation %d, applied last, is past it)",
			h.From, h.Applied)
	}
	return s
}

// HoldBack composes a held-back declaration: desired's header (machine,
// generation, composed_*, the target host release, so the host can still
// be upgraded by a rollout) around the resources of the newest declaration
// the machine applied that the host can express — applied holds the
// declarations it applied, newest first, appliedGen the generation it
// applied last (0: none yet, so no resources) — in the lowest schema the
// host decodes that expresses them. It returns the generation whose
// content it carries.
//
// Never partial: all of one applied declaration's content, none of
// anything else. The newest applied content is past the host only when the
// host was rolled back after applying it (a trial that applied schema-2
// content, then put back by its launcher): the content before it is what
// that host last ran, and what it can keep, renew and check; when that
// was nothing, the declaration says empty_ok, as going back to it is
// meant, not a store that lost the machine's content. When no
// applied declaration is expressible (or the last applied is not on
// record) it is an error and nothing is sent: no resources would tear the
// machine down, which a declaration must never do by being stale.
func HoldBack(desired *DeclarationPayload, applied []*DeclarationPayload, appliedGen int64, host Schemas) (*DeclarationPayload, int64, error) {
	p := *desired
	if appliedGen == 0 {
		applied = []*DeclarationPayload{{Resources: []Resource{}, EmptyOK: desired.EmptyOK}}
	} else if len(applied) == 0 || applied[0].Generation != appliedGen {
		return nil, 0, fmt.Errorf("%w: machine %s: the declaration of generation %d, which it applied last, is not on record",
			ErrInvalid, desired.Machine, appliedGen)
	}
	for _, a := range applied {
		need := NeededSchema(a.Resources)
		s, ok := host.Pick(need)
		if !ok {
			continue
		}
		p.Resources, p.EmptyOK, p.Schema = a.Resources, a.EmptyOK, s
		if p.Resources == nil {
			p.Resources = []Resource{}
		}
		if a.Generation != appliedGen && len(p.Resources) == 0 {
			// Going back to nothing, which the machine ran before the
			// trial, is meant: without empty_ok the host would refuse it
			// while the trial's resources run (its guard against a lost
			// store) and take no declaration again.
			p.EmptyOK = true
		}
		return &p, a.Generation, nil
	}
	return nil, 0, fmt.Errorf("%w: machine %s: the content of generation %d, which it applied last, needs schema %d, its host decodes %s, and no earlier declaration it applied that its host decodes is on record",
		ErrInvalid, desired.Machine, appliedGen, NeededSchema(applied[0].Resources), host)
}
