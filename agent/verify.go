package agent

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"path"
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

// verify checks the envelope's signature over the exact payload bytes with
// a trusted key, then decodes strictly: bytes first, meaning second.
func verify(body []byte, keys []PublicKey, machine string) (*verified, error) {
	var env struct {
		Payload    []byte             `json:"payload"`
		Signatures []models.Signature `json:"signatures"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, refuse("not a declaration envelope: %v", err)
	}
	ok := false
	for _, s := range env.Signatures {
		for _, k := range keys {
			if k.KeyID == s.KeyID && len(k.PublicKey) == ed25519.PublicKeySize &&
				ed25519.Verify(ed25519.PublicKey(k.PublicKey), env.Payload, s.Sig) {
				ok = true
			}
		}
	}
	if !ok {
		return nil, refuse("not verified: no signature by a trusted key")
	}
	v := &verified{payload: env.Payload, digest: models.DigestOf(env.Payload)}
	dec = json.NewDecoder(bytes.NewReader(env.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v.decl); err != nil {
		return v, refuse("bad field: %v", err)
	}
	if dec.More() {
		return v, refuse("bad field: trailing data after the declaration")
	}
	if v.decl.Schema != models.SchemaV1 {
		return v, refuse("bad field: schema %d, this host decodes %s", v.decl.Schema, SchemaHeader)
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
	for _, r := range d.Resources {
		if r.ID == "" || ids[r.ID] {
			return refuse("bad field: resource id %q is empty or repeated", r.ID)
		}
		ids[r.ID] = true
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
		default:
			return refuse("bad field: resource %s has unknown kind %q", r.ID, r.Kind)
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
	state := map[string]int{} // 1 visiting, 2 done
	var out []models.Resource
	var visit func(id string, chain []string) error
	visit = func(id string, chain []string) error {
		switch state[id] {
		case 1:
			return fmt.Errorf("dependency cycle: %s", strings.Join(append(chain, id), " → "))
		case 2:
			return nil
		}
		state[id] = 1
		for _, a := range byID[id].After {
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
