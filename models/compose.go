package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Manifest is what a build declares.
type Manifest struct {
	Resources []ManifestResource `json:"resources"`
}

// ManifestResource is one resource of a manifest; composing prefixes its
// name with the module's.
type ManifestResource struct {
	Name     string            `json:"name"`
	Kind     string            `json:"kind"`
	Path     string            `json:"path,omitempty"`
	Artifact *Artifact         `json:"artifact,omitempty"`
	Content  *string           `json:"content,omitempty"`
	Mode     string            `json:"mode,omitempty"`
	Command  []string          `json:"command,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	After    []string          `json:"after,omitempty"`
	Check    *Check            `json:"check,omitempty"`
	OnRemove string            `json:"on_remove,omitempty"`

	// Schema 2: a certificate (see certificate.go).
	Names    []string  `json:"names,omitempty"`
	KeyPath  string    `json:"key_path,omitempty"`
	Owner    string    `json:"owner,omitempty"`
	Lifetime string    `json:"lifetime,omitempty"`
	OnRenew  []OnRenew `json:"on_renew,omitempty"`
}

// ParseManifest decodes and checks a manifest strictly.
func ParseManifest(b []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, Invalid("manifest", JSONWords(err))
	}
	if m.Resources == nil {
		m.Resources = []ManifestResource{}
	}
	seen := map[string]bool{}
	kinds := map[string]string{}
	for _, r := range m.Resources {
		kinds[r.Name] = r.Kind
	}
	for i, r := range m.Resources {
		f := fmt.Sprintf("manifest.resources[%d]", i)
		if err := ValidName(f+".name", r.Name); err != nil {
			return nil, err
		}
		if seen[r.Name] {
			return nil, Invalid(f+".name", "duplicate resource name "+r.Name)
		}
		seen[r.Name] = true
		switch r.Kind {
		case "file":
			if r.Content == nil {
				return nil, Invalid(f+".content", "a file needs content")
			}
			if r.Mode != "" && !modeRE.MatchString(r.Mode) {
				return nil, Invalid(f+".mode", "mode is octal like 0644")
			}
			fallthrough
		case "tree":
			if !strings.HasPrefix(r.Path, "/") || strings.Contains(r.Path, "..") || path.Clean(r.Path) != r.Path || r.Path == "/" {
				return nil, Invalid(f+".path", "an absolute, clean path without '..', not / itself, is needed")
			}
			if MeshWorkPath(r.Path) != "" {
				return nil, meshWorkInvalid(f+".path", r.Path)
			}
			if r.Artifact != nil && !ValidDigest(r.Artifact.Digest) {
				return nil, Invalid(f+".artifact.digest", "sha256:<64 lowercase hex digits>")
			}
		case "service":
			// A command that starts with a placeholder is checked once
			// substituted, when composing.
			if len(r.Command) == 0 || !strings.HasPrefix(r.Command[0], "/") && !strings.HasPrefix(r.Command[0], "${") {
				return nil, Invalid(f+".command", "a service needs a command with an absolute path")
			}
		case ResourceCertificate:
			if err := checkManifestCertificate(f, &r, kinds); err != nil {
				return nil, err
			}
		default:
			return nil, Invalid(f+".kind", "kind is file, tree, service or certificate")
		}
		if r.Kind != ResourceCertificate {
			if err := checkNotCertificate(f, &r); err != nil {
				return nil, err
			}
		}
		if r.OnRemove != "" && r.OnRemove != "delete" && r.OnRemove != "forget" {
			return nil, Invalid(f+".on_remove", "on_remove is delete or forget")
		}
		if r.Check != nil {
			n := 0
			if r.Check.TCP != "" {
				n++
			}
			if r.Check.HTTP != "" {
				n++
			}
			if len(r.Check.Exec) > 0 {
				n++
			}
			if r.Check.TLS != "" {
				n++
			}
			if n != 1 {
				return nil, Invalid(f+".check", "a check is exactly one of tcp, http, exec, tls")
			}
			if err := checkTLSCheck(f+".check", r.Check); err != nil {
				return nil, err
			}
		}
	}
	for i, r := range m.Resources {
		for _, a := range r.After {
			if !seen[a] {
				return nil, Invalid(fmt.Sprintf("manifest.resources[%d].after", i), "names no resource of this manifest: "+a)
			}
		}
	}
	if cycle := afterCycle(m.Resources); cycle != "" {
		return nil, Invalid("manifest.resources", "dependency cycle: "+cycle)
	}
	return &m, nil
}

// WithinTree says whether one of paths lies beneath tree path dir: the
// resource is applied after the tree.
func WithinTree(dir string, paths ...string) bool {
	for _, p := range paths {
		if dir != "" && p != "" && strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") {
			return true
		}
	}
	return false
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// afterCycle names a cycle of `after` among rs, or "". Hosts refuse a
// declaration with one, so a build with one could never be applied.
func afterCycle(rs []ManifestResource) string {
	after := map[string][]string{}
	for _, r := range rs {
		after[r.Name] = r.After
	}
	// What lies beneath a tree's path comes after the tree on a host
	// (named or not), so an `after` the other way round is a cycle there.
	for _, t := range rs {
		if t.Kind != "tree" {
			continue
		}
		for _, r := range rs {
			if r.Name != t.Name && WithinTree(t.Path, r.Path, r.KeyPath, firstOf(r.Command)) {
				after[r.Name] = append([]string{t.Name}, after[r.Name]...)
			}
		}
	}
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string, chain []string) string
	visit = func(n string, chain []string) string {
		switch state[n] {
		case 1:
			return strings.Join(append(chain, n), " → ")
		case 2:
			return ""
		}
		state[n] = 1
		for _, a := range after[n] {
			if c := visit(a, append(chain, n)); c != "" {
				return c
			}
		}
		state[n] = 2
		return ""
	}
	for _, r := range rs {
		if c := visit(r.Name, nil); c != "" {
			return c
		}
	}
	return ""
}

// checkComposed holds a substituted resource to what every host checks
// (agent's checkResources): a variable can make a clean path unclean or a
// command relative, and a declaration a host refuses must not be sent.
func checkComposed(r *Resource) error {
	switch r.Kind {
	case "file", "tree":
		if !managedPath(r.Path) {
			return Invalid("path", fmt.Sprintf("%q is not an absolute, clean path once substituted", r.Path))
		}
	case "service":
		// The command's path is checked by the host as a declared path is
		// (clean, and not / itself), not only for its leading slash.
		if len(r.Command) == 0 || !managedPath(r.Command[0]) {
			return Invalid("command", fmt.Sprintf("%q does not start with an absolute, clean path once substituted", r.Command))
		}
		if r.Check != nil && len(r.Check.Exec) > 0 && !managedPath(r.Check.Exec[0]) {
			return Invalid("check.exec", fmt.Sprintf("%q does not start with an absolute, clean path once substituted", r.Check.Exec))
		}
	}
	return checkComposedSchema2(r)
}

// managedPath is a path a host manages: absolute, clean, not / itself,
// and not among the tree versions mesh keeps (MeshWorkPath).
func managedPath(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p && p != "/" && MeshWorkPath(p) == ""
}

// MeshWorkPath returns the part of path p, if any, that names where a host
// keeps a tree's unpacked versions: the directory .NAME.mesh beside the
// tree's path NAME. Nothing may be declared there: a file written in it
// went with the tree's next version or its removal, reported created.
func MeshWorkPath(p string) string {
	for _, c := range strings.Split(p, "/") {
		if len(c) > len(".x.mesh")-1 && strings.HasPrefix(c, ".") && strings.HasSuffix(c, ".mesh") {
			return c
		}
	}
	return ""
}

// meshWorkInvalid is the refusal of a path in a tree's versions.
func meshWorkInvalid(field, p string) error {
	return Invalid(field, fmt.Sprintf("%s lies in %s, where a host keeps a tree's unpacked versions: nothing may be declared there", p, MeshWorkPath(p)))
}

// ComposeInput is everything one declaration is made of.
type ComposeInput struct {
	Machine    string
	Generation int64
	EmptyOK    bool
	ComposedAt time.Time
	ComposedBy string
	Variables  map[string]string
	Host       *HostRelease
	Modules    []ComposeModule
}

// ComposeModule is one assigned module with the build chosen for it.
type ComposeModule struct {
	Name     string
	Build    int64
	Digest   string
	Size     int64
	Manifest string
	// Parsed is Manifest already parsed (composing a batch parses each
	// build once); nil means parse Manifest.
	Parsed *Manifest
	// Shared, when not nil, keeps the build's resources that name no
	// placeholder composed and encoded once, for every machine of a
	// batch: it belongs to this module's build and to Parsed.
	Shared *SharedParts
}

// SharedParts are the resources of one module's build that name no
// placeholder, each composed and encoded to JSON once: they are the same
// bytes in the declaration of every machine that runs the build, so a
// batch encodes them once rather than once a machine (a service's manifest
// of 40 resources, 34 of them the same everywhere, spent more of each
// machine's composing encoding them than anything else). Not safe for
// use by two goroutines at once; a batch composes in one.
type SharedParts struct {
	man   *Manifest    // the build's manifest, parsed: what the parts are of
	parts []sharedPart // by the resource's index in man
}

type sharedPart struct {
	done bool
	res  Resource // raw holds its encoding
	err  error
}

// NewSharedParts is an empty SharedParts for the module build whose
// manifest parsed is man; it serves a ComposeModule whose Parsed is man.
func NewSharedParts(man *Manifest) *SharedParts {
	return &SharedParts{man: man, parts: make([]sharedPart, len(man.Resources))}
}

var placeholderRE = regexp.MustCompile(`\$\{([a-z]+)\.([A-Za-z0-9_.-]+)\}`)

// ComposePayload builds the declaration of in.
func ComposePayload(in ComposeInput) (*DeclarationPayload, error) {
	p := &DeclarationPayload{
		Schema: SchemaV1, Machine: in.Machine, Generation: in.Generation,
		ComposedAt: in.ComposedAt.UTC().Truncate(time.Second), ComposedBy: in.ComposedBy,
		EmptyOK: in.EmptyOK, Host: in.Host,
	}
	mods := append([]ComposeModule(nil), in.Modules...)
	sort.Slice(mods, func(i, j int) bool { return mods[i].Name < mods[j].Name })
	n := 0
	for _, m := range mods {
		if m.Parsed != nil {
			n += len(m.Parsed.Resources)
		}
	}
	p.Resources = make([]Resource, 0, n)
	ids := make(map[string]bool, n)
	var paths map[string]string
	for _, m := range mods {
		man := m.Parsed
		if man == nil {
			var err error
			if man, err = ParseManifest([]byte(m.Manifest)); err != nil {
				return nil, fmt.Errorf("module %s build %d: %w", m.Name, m.Build, err)
			}
		}
		if m.Shared != nil && m.Shared.man != man {
			m.Shared = nil // given with another manifest than its own: not used
		}
		for i := range man.Resources {
			var res Resource
			var err error
			if sp := m.Shared.part(i); sp != nil {
				res, err = sp.res, sp.err
			} else {
				res, err = composeResource(m, &man.Resources[i], in)
				if m.Shared != nil && !man.Resources[i].namesPlaceholder() {
					// The same for every machine: encoded once, here.
					if err == nil {
						res.raw, err = json.Marshal(&res)
					}
					m.Shared.parts[i] = sharedPart{done: true, res: res, err: err}
				}
			}
			if err != nil {
				return nil, err
			}
			// Names may hold '.', so module a.b's resource c and module
			// a's resource b.c are both a.b.c; a host refuses the repeat.
			if ids[res.ID] {
				return nil, Invalid("resources", fmt.Sprintf("module %s build %d: resource id %s is also another module's", m.Name, m.Build, res.ID))
			}
			ids[res.ID] = true
			// A host refuses two resources at one path too (each would
			// overwrite the other): say so here, where a person can act.
			// A service's path is its systemd unit's, which the host
			// writes under --services systemd: a file there (its path a
			// variable's) took the service's unit, which then started what
			// the file said.
			pths := [2]string{res.Path, res.KeyPath}
			if res.Kind == "service" {
				pths = [2]string{UnitPath(res.ID)}
				for k := range res.Env {
					if !ValidEnvName(k) {
						return nil, Invalid("resources", fmt.Sprintf("module %s build %d: service %s's env name %q is not letters, digits and '_' (systemd drops it)", m.Name, m.Build, res.ID, k))
					}
				}
			}
			for _, pth := range pths {
				if pth == "" {
					continue
				}
				if u := UnitAt(pth); res.Kind != "service" && u != "" {
					return nil, Invalid("resources", fmt.Sprintf("module %s build %d: resource %s declares the path %s, which would be or change %s: declare a service's settings in its manifest", m.Name, m.Build, res.ID, pth, u))
				}
				if other, ok := paths[pth]; ok && other != res.ID {
					return nil, Invalid("resources", fmt.Sprintf("module %s build %d: resource %s declares the path %s, as %s does", m.Name, m.Build, res.ID, pth, other))
				}
				if paths == nil {
					paths = make(map[string]string, n)
				}
				paths[pth] = res.ID
			}
			p.Resources = append(p.Resources, res)
		}
	}
	// The lowest schema that expresses the content; the store raises it
	// to one the host advertises (Schemas.Pick) or holds the content back.
	p.Schema = NeededSchema(p.Resources)
	return p, nil
}

// UnitName is the systemd unit of a service resource, as the host writes
// it under --services systemd; UnitPath is where.
func UnitName(id string) string { return "mesh-" + strings.ReplaceAll(id, ".", "-") + ".service" }

// UnitPath is where the host writes a service's systemd unit.
func UnitPath(id string) string { return "/etc/systemd/system/" + UnitName(id) }

// unitDirs are where systemd reads units and their drop-ins from: a
// unit's drop-ins apply from every one of them, not only the one its unit
// file won in. /var/run is /run.
var unitDirs = func() []string {
	ds := []string{"/etc/systemd/system.control/", "/run/systemd/system.control/", "/run/systemd/transient/",
		"/run/systemd/generator.early/", "/etc/systemd/system/", "/etc/systemd/system.attached/", "/run/systemd/system/",
		"/run/systemd/system.attached/", "/run/systemd/generator/", "/usr/local/lib/systemd/system/", "/usr/lib/systemd/system/",
		"/lib/systemd/system/", "/run/systemd/generator.late/"}
	for _, d := range ds {
		if strings.HasPrefix(d, "/run/") {
			ds = append(ds, "/var"+d)
		}
	}
	return ds
}()

// unitDirAncestors are the unit directories and every directory above
// one, each with the unit directory it holds: a tree there holds what its
// archive does.
var unitDirAncestors = func() map[string]string {
	m := map[string]string{}
	for _, d := range unitDirs {
		d = strings.TrimSuffix(d, "/")
		for a := d; a != "/" && a != "."; a = path.Dir(a) {
			if _, ok := m[a]; !ok {
				m[a] = d
			}
		}
	}
	return m
}()

// UnitAt says what of systemd's a resource at p would be or change that
// mesh's services run by ("" for nothing): a unit file of mesh's
// ("mesh-MODULE-NAME.service") or a drop-in of it in any of systemd's unit
// directories — its own, one of a prefix of its name ("mesh-.service.d",
// "mesh-web-.service.d"), or every service's ("service.d") — or, for a
// tree, one of those directories or a directory above one (its archive
// holds what lies beneath). A file there, its path a variable's, took a
// service's unit, which then started what the file said. The host's own
// unit, /etc/systemd/system/mesh-host.service and its drop-ins there, is
// a declarable file the host checks (no service's id is without a dot, so
// no service's unit has its name); anywhere else, systemd would apply it
// unchecked.
func UnitAt(p string) string {
	// Composing asks this of every path of every machine: a path neither
	// above a unit directory nor under systemd's costs one map lookup.
	if d, ok := unitDirAncestors[p]; ok {
		return "the systemd unit directory " + d + ", where the units of mesh's services are read from"
	}
	if !strings.Contains(p, "/systemd/") {
		return ""
	}
	for _, d := range unitDirs {
		rest, ok := strings.CutPrefix(p, d)
		if !ok {
			continue
		}
		first, _, _ := strings.Cut(rest, "/")
		if first == "service.d" {
			return "every service's drop-ins (" + d + "service.d), which the units of mesh's services read"
		}
		u := strings.TrimSuffix(first, ".d")
		if u == "mesh-host.service" && d == "/etc/systemd/system/" {
			continue
		}
		if strings.HasPrefix(u, "mesh-") && strings.HasSuffix(u, ".service") {
			return "the systemd unit " + u + " (or a drop-in of it), which mesh writes for its services and the host"
		}
	}
	return ""
}

// Manifest is the parsed manifest sp is of (nil for no sp).
func (sp *SharedParts) Manifest() *Manifest {
	if sp == nil {
		return nil
	}
	return sp.man
}

// part is resource i composed and encoded before, or nil.
func (sp *SharedParts) part(i int) *sharedPart {
	if sp == nil || !sp.parts[i].done {
		return nil
	}
	return &sp.parts[i]
}

// composeResource composes resource r of module build m for in's machine.
func composeResource(m ComposeModule, r *ManifestResource, in ComposeInput) (Resource, error) {
	res := Resource{
		ID: m.Name + "." + r.Name, Module: m.Name, Build: m.Build, Kind: r.Kind,
		Path: r.Path, Artifact: r.Artifact, Content: r.Content, Mode: r.Mode,
		Command: append([]string(nil), r.Command...), Env: r.Env, Check: r.Check, OnRemove: r.OnRemove,
		Names: append([]string(nil), r.Names...), KeyPath: r.KeyPath, Owner: r.Owner, Lifetime: r.Lifetime,
	}
	if len(res.Names) == 0 {
		res.Names = nil // nil, not [], so omitempty keeps schema-1 bytes
	}
	for _, o := range r.OnRenew {
		res.OnRenew = append(res.OnRenew, OnRenew{Service: m.Name + "." + o.Service, Signal: o.Signal})
	}
	if r.Kind == "tree" && res.Artifact == nil {
		if m.Digest == "" {
			return res, Invalid("manifest", fmt.Sprintf("module %s build %d: tree %s has no artifact", m.Name, m.Build, r.Name))
		}
		res.Artifact = &Artifact{Digest: m.Digest, Size: m.Size, URL: BlobURL(m.Digest)}
	}
	for _, a := range r.After {
		res.After = append(res.After, m.Name+"."+a)
	}
	if err := substitute(&res, in); err != nil {
		return res, fmt.Errorf("module %s build %d resource %s: %w", m.Name, m.Build, r.Name, err)
	}
	if err := checkComposed(&res); err != nil {
		return res, fmt.Errorf("module %s build %d resource %s: %w", m.Name, m.Build, r.Name, err)
	}
	return res, nil
}

// namesPlaceholder reports whether a string substitute reads in r holds
// "${": without one, r composes to the same resource on every machine.
func (r *ManifestResource) namesPlaceholder() bool {
	has := func(ss ...string) bool {
		for _, s := range ss {
			if strings.Contains(s, "${") {
				return true
			}
		}
		return false
	}
	if has(r.Path, r.KeyPath) || has(r.Command...) || has(r.Names...) || envHasPlaceholder(r.Env) {
		return true
	}
	if r.Content != nil && has(*r.Content) {
		return true
	}
	return r.Check != nil && (has(r.Check.TCP, r.Check.HTTP, r.Check.TLS, r.Check.ServerName) || has(r.Check.Exec...))
}

// Marshal is json.Marshal(p): the same bytes, with each resource composed
// once for many machines (SharedParts) spliced in as it was encoded then.
// An element of a slice is encoded as it is alone, so the splice changes
// no byte (TestMarshal_AsJSON and FuzzParseManifest hold it to json.Marshal).
func (p *DeclarationPayload) Marshal() ([]byte, error) {
	spliced := 0
	for i := range p.Resources {
		spliced += len(p.Resources[i].raw)
	}
	if spliced == 0 {
		return json.Marshal(p)
	}
	head := *p
	head.Resources = []Resource{}
	h, err := json.Marshal(&head)
	if err != nil {
		return nil, err
	}
	const empty = `[]}`
	if !bytes.HasSuffix(h, []byte(empty)) {
		return json.Marshal(p)
	}
	b := make([]byte, 0, len(h)+spliced+len(p.Resources)*(1+512))
	b = append(b, h[:len(h)-len(empty)]...)
	b = append(b, '[')
	for i := range p.Resources {
		if i > 0 {
			b = append(b, ',')
		}
		raw := p.Resources[i].raw
		if raw == nil {
			if raw, err = json.Marshal(&p.Resources[i]); err != nil {
				return nil, err
			}
		}
		b = append(b, raw...)
	}
	return append(b, ']', '}'), nil
}

// Artifacts lists the blob digests a declaration names.
func (p *DeclarationPayload) Artifacts() []string {
	var ds []string
	for _, r := range p.Resources {
		if r.Artifact != nil {
			ds = append(ds, r.Artifact.Digest)
		}
	}
	if p.Host != nil {
		ds = append(ds, p.Host.Digest)
	}
	return ds
}

// substitute replaces ${machine.name} and ${var.NAME} in every string of r.
// A variable that is not set is an error: a declaration with a hole in it
// must not reach a machine.
func substitute(r *Resource, in ComposeInput) error {
	var err error
	sub := func(s string) string {
		if !strings.Contains(s, "${") {
			// Most strings of a manifest hold no placeholder: the
			// regular expression's scan of each was ~3 µs of a
			// machine's declaration in a fan-out.
			return s
		}
		return expandPlaceholders(s, func(ph, scope, name string) string {
			switch {
			case scope == "machine" && name == "name":
				return in.Machine
			case scope == "var":
				v, ok := in.Variables[name]
				if !ok && err == nil {
					err = Invalid("variables", fmt.Sprintf("%s is not set on machine %s", ph, in.Machine))
				}
				return v
			}
			if err == nil {
				err = Invalid("manifest", "unknown placeholder "+ph)
			}
			return ph
		})
	}
	r.Path = sub(r.Path)
	if r.Content != nil {
		c := sub(*r.Content)
		r.Content = &c
	}
	for i := range r.Command {
		r.Command[i] = sub(r.Command[i])
	}
	if r.Env != nil && envHasPlaceholder(r.Env) {
		// The manifest's map is shared by every machine's declaration:
		// a copy with the values substituted, only when one needs it.
		env := make(map[string]string, len(r.Env))
		for k, v := range r.Env {
			env[k] = sub(v)
		}
		r.Env = env
	}
	r.KeyPath = sub(r.KeyPath)
	for i := range r.Names {
		r.Names[i] = sub(r.Names[i])
	}
	if r.Check != nil {
		c := *r.Check
		c.TCP, c.HTTP = sub(c.TCP), sub(c.HTTP)
		c.TLS, c.ServerName = sub(c.TLS), sub(c.ServerName)
		c.Exec = append([]string(nil), c.Exec...)
		for i := range c.Exec {
			c.Exec[i] = sub(c.Exec[i])
		}
		r.Check = &c
	}
	return err
}

// expandPlaceholders replaces each placeholderRE match in s, leftmost
// first, by f(the placeholder, its scope, its name), as the expression's
// ReplaceAllStringFunc would: a scan by hand, since every machine's
// declaration substitutes each string of its manifest that holds one,
// and the expression's matching and submatching were ~2 µs of a machine
// in a fan-out (FuzzExpandPlaceholders holds the two to the same result).
func expandPlaceholders(s string, f func(ph, scope, name string) string) string {
	var b strings.Builder
	done := 0 // s[:done] is written to b, or is all of s's head without a match
	for from := 0; ; {
		i := strings.Index(s[from:], "${")
		if i < 0 {
			break
		}
		start := from + i
		from = start + 1 // where the next try begins when this is no placeholder
		dot := start + 2
		for dot < len(s) && 'a' <= s[dot] && s[dot] <= 'z' {
			dot++
		}
		if dot == start+2 || dot == len(s) || s[dot] != '.' {
			continue
		}
		end := dot + 1
		for end < len(s) && placeholderNameByte(s[end]) {
			end++
		}
		if end == dot+1 || end == len(s) || s[end] != '}' {
			continue
		}
		b.WriteString(s[done:start])
		b.WriteString(f(s[start:end+1], s[start+2:dot], s[dot+1:end]))
		done, from = end+1, end+1
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// placeholderNameByte is whether c may be in a placeholder's name
// ([A-Za-z0-9_.-] in placeholderRE).
func placeholderNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
}

// envHasPlaceholder reports whether a value of env holds "${".
func envHasPlaceholder(env map[string]string) bool {
	for _, v := range env {
		if strings.Contains(v, "${") {
			return true
		}
	}
	return false
}

// GoneBack is a module's going back: a person made an older build current
// for Reason, over builds up to From.
type GoneBack struct {
	Reason string
	From   int64
}

// Back is the module's going back (zero when it has not gone back).
func (m *Module) Back() GoneBack { return GoneBack{Reason: m.CurrentReason, From: m.CurrentBackFrom} }

// Forward is the going back once build number is made current, going
// forward: kept while number is older than the newest build gone back
// from (a machine still on that one, offline, is moved to it), ended once
// that build or a newer one is current again.
func (g GoneBack) Forward(number int64) GoneBack {
	if g.Reason == "" || number >= g.From {
		return GoneBack{}
	}
	return g
}

// Covers says whether a machine running build running is moved back: a
// build the person went back from, not one a plan reached it with since.
func (g GoneBack) Covers(running int64) bool { return g.Reason != "" && running <= g.From }

// ChooseBuild is the build a machine gets for a module, in DESIGN.md's order:
// its pin; else the plan's target; else the module's current build. It never
// gives an older build than the machine reports running unless a person
// chose that build with a reason: pinned it, or went back from the build it
// runs (back: for the whole module at once), so that what it is given —
// the current build, or a plan's made since — is given whatever it runs.
func ChooseBuild(pin *int64, pinReason string, planTarget, current *int64, back GoneBack, running int64) (int64, bool) {
	if pin != nil {
		if *pin < running && pinReason == "" {
			return running, true
		}
		return *pin, true
	}
	var b *int64
	goBack := back.Covers(running)
	if planTarget != nil {
		b = planTarget
	} else if current != nil {
		b = current
	}
	if b == nil {
		if running > 0 {
			return running, true
		}
		return 0, false
	}
	if *b < running && !goBack {
		return running, true
	}
	return *b, true
}

// envNameRE is an environment variable's name as systemd takes it.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName says whether k is a name systemd takes for an environment
// variable: it drops any other ("Invalid environment assignment,
// ignoring"), and the service ran without it under --services systemd.
// Refused at upload, at compose (a build stored before the rule) and by
// the host.
func ValidEnvName(k string) bool { return envNameRE.MatchString(k) }

// Buildable refuses, at upload, what can never be composed into a build
// with (or without) an uploaded artifact: a tree that names no artifact in
// a build that has none. What depends on a machine (a missing variable)
// stays a per-machine compose error.
func (m *Manifest) Buildable(hasArtifact bool) error {
	for i, r := range m.Resources {
		f := fmt.Sprintf("manifest.resources[%d]", i)
		strs := map[string]string{f + ".path": r.Path, f + ".key_path": r.KeyPath}
		for j, n := range r.Names {
			strs[fmt.Sprintf("%s.names[%d]", f, j)] = n
		}
		if r.Content != nil {
			strs[f+".content"] = *r.Content
		}
		for j, c := range r.Command {
			strs[fmt.Sprintf("%s.command[%d]", f, j)] = c
		}
		for k, v := range r.Env {
			strs[f+".env."+k] = v
			// Under --services systemd a name of another shape is dropped
			// ("Invalid environment assignment, ignoring"): the service
			// ran without it, where the host's own supervisor passed it.
			if !ValidEnvName(k) {
				return Invalid(f+".env."+k, "an environment variable's name is letters, digits and '_', not starting with a digit (systemd drops any other)")
			}
		}
		for field, v := range strs {
			if err := checkPlaceholders(field, v); err != nil {
				return err
			}
		}
		if r.Kind == "tree" && r.Artifact == nil && !hasArtifact {
			return Invalid(fmt.Sprintf("manifest.resources[%d].artifact", i), "tree "+r.Name+" names no artifact and the build uploads none: upload the tree's archive as the build's artifact, or name one")
		}
	}
	return nil
}

// UnpacksArtifact is the name of the first tree that unpacks the build's
// own artifact ("" when none does).
func (m *Manifest) UnpacksArtifact() string {
	for _, r := range m.Resources {
		if r.Kind == "tree" && r.Artifact == nil {
			return r.Name
		}
	}
	return ""
}

// checkPlaceholders refuses a "${" that is not ${machine.name} or
// ${var.NAME}: no machine could ever compose it.
func checkPlaceholders(field, v string) error {
	for i := strings.Index(v, "${"); i >= 0; i = strings.Index(v, "${") {
		m := placeholderRE.FindStringSubmatchIndex(v[i:])
		if m == nil || m[0] != 0 {
			return Invalid(field, "a placeholder is ${machine.name} or ${var.NAME}")
		}
		scope, name := v[i+m[2]:i+m[3]], v[i+m[4]:i+m[5]]
		if !(scope == "machine" && name == "name") && !(scope == "var" && varKeyRE.MatchString(name)) {
			return Invalid(field, "a placeholder is ${machine.name} or ${var.NAME}, not ${"+scope+"."+name+"}")
		}
		v = v[i+m[1]:]
	}
	return nil
}
