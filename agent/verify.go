package agent

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"

	"mesh/models"
)

// refusal is a declaration the host will not apply, with the reason it
// journals and reports.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

func refuse(format string, a ...any) error { return &refusal{reason: fmt.Sprintf(format, a...)} }

// verified is a declaration whose signature, machine and fields checked out.
type verified struct {
	payload []byte
	digest  string
	decl    models.DeclarationPayload
}

// verify checks the envelope over the exact payload bytes with a trusted
// key — its own signature, or (a batch envelope) the payload's inclusion
// proof and the signature of its batch's root — then decodes strictly:
// bytes first, meaning second.
func verify(body []byte, keys []PublicKey, machine string) (*verified, error) {
	payload, err := models.OpenEnvelope(body, func(keyID string, msg, sig []byte) bool {
		for _, k := range keys {
			if k.KeyID == keyID && len(k.PublicKey) == ed25519.PublicKeySize &&
				ed25519.Verify(ed25519.PublicKey(k.PublicKey), msg, sig) {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, refuse("%v", err)
	}
	v := &verified{payload: payload, digest: models.DigestOf(payload)}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v.decl); err != nil {
		return v, refuse("bad field: %v", err)
	}
	if dec.More() {
		return v, refuse("bad field: trailing data after the declaration")
	}
	if !slices.Contains(models.SchemasOf(SchemaHeader), v.decl.Schema) {
		return v, refuse("bad field: schema %d, this host decodes %s", v.decl.Schema, SchemaHeader)
	}
	// Strict decoding took every field this host knows; a field of a later
	// schema in a declaration that says an earlier one is refused as a
	// host of that schema would refuse it.
	if need := models.NeededSchema(v.decl.Resources); need > v.decl.Schema {
		return v, refuse("bad field: a schema-%d declaration with content of schema %d", v.decl.Schema, need)
	}
	if v.decl.Machine != machine {
		return v, refuse("other machine: the declaration is for %q, this is %q", v.decl.Machine, machine)
	}
	return v, nil
}

// checkResources refuses fields the host cannot apply safely: unknown
// kinds, paths outside the allowed roots, broken dependencies.
func checkResources(d *models.DeclarationPayload, allowRoots []string) error {
	ids := map[string]bool{}
	paths := map[string]string{}
	for _, r := range d.Resources {
		if r.ID == "" || ids[r.ID] {
			return refuse("bad field: resource id %q is empty or repeated", r.ID)
		}
		ids[r.ID] = true
		// Two resources at one path would each overwrite the other, and
		// one removed later would delete what the other keeps there. A
		// service's path is its systemd unit's (written under --services
		// systemd): a file there took the unit, which started what the
		// file said rather than the service's command.
		ps := resourcePaths(r)
		if r.Kind == "service" {
			ps = []string{unitPath(r.ID)}
		}
		for _, p := range ps {
			if u := models.UnitAt(p); r.Kind != "service" && u != "" {
				return refuse("bad field: %s declares the path %s, which would be or change %s", r.ID, p, u)
			}
			if other := paths[p]; other != "" && other != r.ID && p != "" {
				return refuse("bad field: %s and %s both declare the path %s", other, r.ID, p)
			}
			paths[p] = r.ID
		}
		switch r.Kind {
		case "file":
			if r.Content == nil {
				return refuse("bad field: file %s has no content", r.ID)
			}
		case "tree":
			if r.Artifact == nil || !models.ValidDigest(r.Artifact.Digest) {
				return refuse("bad field: tree %s has no artifact digest", r.ID)
			}
		case "service":
			if len(r.Command) == 0 || !strings.HasPrefix(r.Command[0], "/") {
				return refuse("bad field: service %s needs an absolute command", r.ID)
			}
			if r.Check != nil && len(r.Check.Exec) > 0 && !strings.HasPrefix(r.Check.Exec[0], "/") {
				return refuse("bad field: service %s's exec check needs an absolute command, like the service's own (both are mapped under --root by one rule)", r.ID)
			}
			for k := range r.Env {
				if !models.ValidEnvName(k) {
					return refuse("bad field: service %s's env name %q is not letters, digits and '_' (systemd drops it)", r.ID, k)
				}
			}
		case models.ResourceCertificate:
			if err := checkCertificate(r, d.Resources, allowRoots); err != nil {
				return err
			}
		default:
			return refuse("bad field: resource %s has unknown kind %q", r.ID, r.Kind)
		}
		if r.Check != nil && r.Check.TLS != "" {
			if _, _, err := net.SplitHostPort(r.Check.TLS); err != nil || models.ValidDNSName(r.Check.ServerName) != nil {
				return refuse("bad field: %s's tls check needs host:port and a server name, not %q and %q", r.ID, r.Check.TLS, r.Check.ServerName)
			}
		}
		if r.Kind == "file" || r.Kind == "tree" {
			if err := allowedPath(r.Path, allowRoots); err != nil {
				return refuse("escape: %s: %v", r.ID, err)
			}
		}
		if r.Kind == "service" {
			if err := allowedPath(r.Command[0], allowRoots); err != nil {
				return refuse("escape: %s: %v", r.ID, err)
			}
			if r.Check != nil && len(r.Check.Exec) > 0 {
				if err := allowedPath(r.Check.Exec[0], allowRoots); err != nil {
					return refuse("escape: %s's exec check: %v", r.ID, err)
				}
			}
		}
		if r.OnRemove != "" && r.OnRemove != "delete" && r.OnRemove != "forget" {
			return refuse("bad field: %s on_remove %q", r.ID, r.OnRemove)
		}
	}
	for _, r := range d.Resources {
		for _, a := range r.After {
			if !ids[a] {
				return refuse("bad field: %s comes after %s, which the declaration does not name", r.ID, a)
			}
		}
	}
	if _, err := order(d.Resources); err != nil {
		return refuse("bad field: %v", err)
	}
	return nil
}

// allowedPath checks a declared path: absolute, clean, under an allowed root.
func allowedPath(p string, roots []string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q is not absolute", p)
	}
	if path.Clean(p) != p || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
		return fmt.Errorf("path %q is not clean", p)
	}
	if p == "/" {
		return fmt.Errorf("path / itself cannot be managed")
	}
	if c := models.MeshWorkPath(p); c != "" {
		return fmt.Errorf("path %s lies in %s, where this host keeps a tree's unpacked versions", p, c)
	}
	for _, r := range roots {
		if r == "/" || p == r || strings.HasPrefix(p, strings.TrimRight(r, "/")+"/") {
			return nil
		}
	}
	return fmt.Errorf("path %s is outside the allowed roots %v", p, roots)
}

// order sorts resources so each comes after what it names in `after`.
func order(rs []models.Resource) ([]models.Resource, error) {
	byID := map[string]models.Resource{}
	for _, r := range rs {
		byID[r.ID] = r
	}
	// What lies beneath a tree's path comes after the tree, named or not:
	// applied before it, it was written through the tree's old link into
	// the version its flip then removed.
	within := map[string][]string{}
	for _, t := range rs {
		if t.Kind != "tree" {
			continue
		}
		for _, r := range rs {
			cmd := ""
			if len(r.Command) > 0 {
				cmd = r.Command[0]
			}
			if r.ID != t.ID && models.WithinTree(t.Path, append(resourcePaths(r), cmd)...) {
				within[r.ID] = append(within[r.ID], t.ID)
			}
		}
	}
	state := map[string]int{} // 1 visiting, 2 done
	var out []models.Resource
	var visit func(id string, chain []string) error
	visit = func(id string, chain []string) error {
		switch state[id] {
		case 1:
			return fmt.Errorf("dependency cycle: %s (what lies beneath a tree's path comes after the tree)", strings.Join(append(chain, id), " → "))
		case 2:
			return nil
		}
		state[id] = 1
		for _, a := range append(within[id], byID[id].After...) {
			if err := visit(a, append(chain, id)); err != nil {
				return err
			}
		}
		state[id] = 2
		out = append(out, byID[id])
		return nil
	}
	for _, r := range rs {
		if err := visit(r.ID, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkCertificate holds a certificate resource to what this host can
// apply safely: DNS names, both files inside the allowed roots, a mode,
// an owner and a lifetime it can read, services to tell that it runs.
func checkCertificate(r models.Resource, all []models.Resource, allowRoots []string) error {
	if len(r.Names) == 0 || len(r.Names) > models.MaxCertificateNames {
		return refuse("bad field: certificate %s names %d DNS names (1 to %d)", r.ID, len(r.Names), models.MaxCertificateNames)
	}
	for _, n := range r.Names {
		if err := models.ValidDNSName(n); err != nil {
			return refuse("bad field: certificate %s: %v", r.ID, err)
		}
	}
	for _, p := range []string{r.Path, r.KeyPath} {
		if err := allowedPath(p, allowRoots); err != nil {
			return refuse("escape: %s: %v", r.ID, err)
		}
	}
	if r.Path == r.KeyPath {
		return refuse("bad field: certificate %s writes its chain and key to one file", r.ID)
	}
	if r.Mode != "" {
		if _, err := strconv.ParseUint(r.Mode, 8, 32); err != nil || len(r.Mode) != 4 {
			return refuse("bad field: certificate %s mode %q", r.ID, r.Mode)
		}
	}
	if _, err := models.CertificateLifetime(r.Lifetime); err != nil {
		return refuse("bad field: certificate %s: %v", r.ID, err)
	}
	for _, o := range r.OnRenew {
		found := false
		for _, s := range all {
			found = found || (s.ID == o.Service && s.Kind == "service")
		}
		if !found {
			return refuse("bad field: certificate %s renews %s, which the declaration does not name as a service", r.ID, o.Service)
		}
		if o.Signal != "" && !models.ValidSignal(o.Signal) {
			return refuse("bad field: certificate %s signals %s with %q", r.ID, o.Service, o.Signal)
		}
	}
	return nil
}
