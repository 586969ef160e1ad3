package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"strconv"

	"mesh/models"
)

// fileDigest identifies a file's content and mode.
func fileDigest(content, mode string) string {
	h := sha256.New()
	h.Write([]byte(mode))
	h.Write([]byte{0})
	h.Write([]byte(content))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func fileMode(m string) fs.FileMode {
	if m == "" {
		return 0o644
	}
	n, err := strconv.ParseUint(m, 8, 32)
	if err != nil {
		return 0o644
	}
	return fs.FileMode(n).Perm()
}

// applyInFull makes the machine equal to the declaration: it creates or
// updates every resource named, in dependency order, and removes what is
// no longer named — services stopped before their files go. st is updated
// as each step succeeds, so a failure part way leaves a state that says
// what is true.
func (a *Agent) applyInFull(ctx context.Context, d *models.DeclarationPayload, st *State) ([]models.Action, error) {
	ordered, err := order(d.Resources)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	kinds := map[string]string{}
	for _, r := range ordered {
		want[r.ID] = true
		kinds[r.ID] = r.Kind
	}
	claimed := claimedPaths(ordered)
	// The files mesh put on the machine before this apply: a tree that
	// takes the path of one (moved away, or no longer named) replaces it.
	a.filesBefore = map[string]bool{}
	for _, m := range st.Resources {
		if m.Kind == "file" {
			a.filesBefore[m.Path] = true
		}
	}
	var actions []models.Action

	// 0. Every tree that changes is fetched and unpacked beside what runs
	// now: an archive refused (an escape, too large) or not fetched ends
	// the apply before anything on the machine changed — no service
	// stopped, no file written — so a refused declaration is refused whole.
	for _, r := range ordered {
		if r.Kind != "tree" {
			continue
		}
		if prev := st.Resources[r.ID]; prev != nil && prev.Digest == r.Artifact.Digest && a.root.treeLive(r.Path, r.Artifact.Digest) {
			continue
		}
		blob, err := a.client.fetchBlob(ctx, a.cfg.StateDir, r.Artifact.Digest, r.Artifact.Size)
		if err == nil {
			_, err = a.root.stageTree(r.Path, r.Artifact.Digest, blob, a.cfg.Unpack, a.filesBefore[r.Path])
		}
		if err != nil {
			return nil, &resourceFailed{id: r.ID, err: fmt.Errorf("%s: %w", r.ID, err)}
		}
	}

	// 1. Services no longer named stop first: nothing may run on files
	// about to go. A service whose id now names another kind is no longer
	// named as a service: left to step 2, which only writes the new kind's
	// files, its process would run on with nothing to stop it.
	for _, id := range sortedIDs(st.Resources) {
		m := st.Resources[id]
		if m.Kind != "service" || kinds[id] == "service" {
			continue
		}
		if err := a.services.Stop(ctx, id); err != nil {
			return actions, fmt.Errorf("stopping %s: %w", id, err)
		}
		delete(st.Resources, id)
		actions = append(actions, models.Action{Resource: id, Action: "removed", Digest: m.Digest, Detail: "stopped"})
	}
	// A service an apply started and the host did not live to record (it
	// was killed before its state was saved) runs on under its pidfile;
	// named by no declaration now, it would never be stopped.
	if sv, ok := a.services.(strayServices); ok {
		for _, id := range sv.Strays(func(id string) bool { return kinds[id] == "service" }) {
			if err := a.services.Stop(ctx, id); err != nil {
				return actions, fmt.Errorf("stopping %s: %w", id, err)
			}
			actions = append(actions, models.Action{Resource: id, Action: "removed",
				Detail: "stopped: started by an apply this host did not live to record"})
		}
	}

	// 2. Everything named, in order.
	digests := map[string]string{}
	units := -1 // the last action on a unit file: systemd must reload
	for _, r := range ordered {
		act, err := a.applyOne(ctx, r, st, digests, claimed)
		if err != nil {
			return actions, &resourceFailed{id: r.ID, err: fmt.Errorf("%s: %w", r.ID, err)}
		}
		if r.Kind == "file" && isUnitFile(r.Path) && act.Action != "unchanged" {
			units = len(actions)
		}
		actions = append(actions, act)
	}

	// 3. Files and trees no longer named, last first.
	ids := sortedIDs(st.Resources)
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		m := st.Resources[id]
		if want[id] {
			continue
		}
		act := models.Action{Resource: id, Action: "removed", Digest: m.Digest}
		if m.OnRemove == "forget" {
			act.Action, act.Detail = "forgotten", "left in place at "+m.Path
		} else if by := claimed[m.Path]; by != "" && m.Kind != models.ResourceCertificate {
			// A resource renamed (or its module) at the same path: step 2
			// wrote the new one there, and removing the old would delete it.
			act.Action, act.Detail = "forgotten", m.Path+" is "+by+"'s now"
		} else {
			if err := a.removeManaged(m, claimed); err != nil {
				return actions, fmt.Errorf("removing %s: %w", id, err)
			}
			act.Detail = m.Path
		}
		if m.Kind == "file" && isUnitFile(m.Path) && act.Action == "removed" {
			units = len(actions)
		}
		delete(st.Resources, id)
		actions = append(actions, act)
	}
	if units >= 0 || a.reloadPending {
		// A failed reload is owed until one succeeds: the retry finds the
		// unit files unchanged.
		a.reloadPending = true
		if err := a.daemonReload(ctx); err != nil {
			return actions, err
		}
		a.reloadPending = false
		if units >= 0 {
			actions[units].Detail += "; systemd reloaded"
		}
	}
	return actions, nil
}

// removeManaged removes what a file, tree or certificate resource put on
// the machine, but for the paths a resource of the declaration being
// applied claims (claimedPaths): those hold what it wrote.
func (a *Agent) removeManaged(m *Managed, claimed map[string]string) error {
	switch m.Kind {
	case "file":
		if claimed[m.Path] == "" {
			return a.root.remove(m.Path)
		}
	case "tree":
		if claimed[m.Path] == "" {
			return a.root.removeTree(m.Path)
		}
	case models.ResourceCertificate:
		return a.removeCertificate(m, nil, claimed)
	}
	return nil
}

// claimedPaths maps each path the resources put on the machine (a file's,
// a tree's, a certificate's chain and key) to the resource's id. Checked
// resources never repeat one (checkResources).
func claimedPaths(rs []models.Resource) map[string]string {
	out := make(map[string]string, len(rs))
	for _, r := range rs {
		for _, p := range resourcePaths(r) {
			out[p] = r.ID
		}
	}
	return out
}

// resourcePaths are the paths a resource puts on the machine.
func resourcePaths(r models.Resource) []string {
	switch r.Kind {
	case "file", "tree":
		return []string{r.Path}
	case models.ResourceCertificate:
		return []string{r.Path, r.KeyPath}
	}
	return nil
}

// applyOne applies one resource; when it moved (a new path or kind), what
// the old one left is removed once the new one is in place.
func (a *Agent) applyOne(ctx context.Context, r models.Resource, st *State, digests, claimed map[string]string) (models.Action, error) {
	var moved *Managed
	// A certificate cleans up its own old files (two paths, and the new
	// ones may reuse one of them).
	if prev := st.Resources[r.ID]; prev != nil && (prev.Path != r.Path || prev.Kind != r.Kind) && prev.OnRemove != "forget" &&
		(prev.Kind != models.ResourceCertificate || r.Kind != models.ResourceCertificate) {
		old := *prev
		moved = &old
	}
	act, err := a.applyResource(ctx, r, st, digests, claimed)
	if err != nil || moved == nil {
		return act, err
	}
	if by := claimed[moved.Path]; by != "" && moved.Kind != models.ResourceCertificate {
		// Its old path is another resource's now (two swapped paths, or
		// one took the other's): that one's content stays.
		act.Detail += " (moved from " + moved.Path + ", " + by + "'s now)"
		return act, nil
	}
	if err := a.removeManaged(moved, claimed); err != nil {
		return act, fmt.Errorf("removing the old %s at %s: %w", moved.Kind, moved.Path, err)
	}
	act.Detail += " (moved from " + moved.Path + ")"
	return act, nil
}

func (a *Agent) applyResource(ctx context.Context, r models.Resource, st *State, digests, claimed map[string]string) (models.Action, error) {
	prev := st.Resources[r.ID]
	verb := "created"
	if prev != nil {
		verb = "updated"
	}
	m := &Managed{Kind: r.Kind, Module: r.Module, Build: r.Build, Path: r.Path, OnRemove: r.OnRemove}
	switch r.Kind {
	case "file":
		mode := fileMode(r.Mode)
		m.Digest = fileDigest(*r.Content, mode.String())
		digests[r.ID] = m.Digest
		if prev != nil && prev.Digest == m.Digest && a.root.fileMatches(r.Path, []byte(*r.Content), mode) {
			st.Resources[r.ID] = m
			return models.Action{Resource: r.ID, Action: "unchanged", Digest: m.Digest}, nil
		}
		if err := a.root.writeFile(r.Path, []byte(*r.Content), mode); err != nil {
			return models.Action{}, err
		}
		st.Resources[r.ID] = m
		return models.Action{Resource: r.ID, Action: verb, Digest: m.Digest, Detail: fmt.Sprintf("%s, %d byte(s), mode %04o", r.Path, len(*r.Content), mode)}, nil
	case "tree":
		m.Digest = r.Artifact.Digest
		digests[r.ID] = m.Digest
		if prev != nil && prev.Digest == m.Digest && a.root.treeLive(r.Path, m.Digest) {
			st.Resources[r.ID] = m
			return models.Action{Resource: r.ID, Action: "unchanged", Digest: m.Digest}, nil
		}
		blob, err := a.client.fetchBlob(ctx, a.cfg.StateDir, r.Artifact.Digest, r.Artifact.Size)
		if err != nil {
			return models.Action{}, err
		}
		if a.filesBefore[r.Path] {
			// A file of mesh's was here (moved away, or no longer named):
			// the tree takes its place.
			if fi, err := a.root.root.Lstat(rel(r.Path)); err == nil && fi.Mode().IsRegular() {
				if err := a.root.remove(r.Path); err != nil {
					return models.Action{}, err
				}
			}
		}
		n, err := a.root.installTree(r.Path, r.Artifact.Digest, blob, a.cfg.Unpack)
		if err != nil {
			return models.Action{}, err
		}
		st.Resources[r.ID] = m
		detail := fmt.Sprintf("%d file(s) at %s", n, r.Path)
		if users := a.usersOf(r.ID); users != "" {
			detail += ", run by " + users
		}
		return models.Action{Resource: r.ID, Action: verb, Digest: m.Digest, Detail: detail}, nil
	case models.ResourceCertificate:
		act, err := a.applyCertificate(ctx, a.applyingSend, r, prev)
		if err != nil {
			return models.Action{}, err
		}
		if prev != nil && prev.OnRemove != "forget" {
			if err := a.removeCertificate(prev, &r, claimed); err != nil {
				return models.Action{}, err
			}
		}
		m.Digest = act.Digest
		digests[r.ID] = m.Digest
		rc := r
		m.Resource = &rc
		st.Resources[r.ID] = m
		return act, nil
	case "service":
		m.Digest = serviceDigest(r, digests)
		digests[r.ID] = m.Digest
		rc := r
		m.Resource = &rc
		act, err := a.services.Ensure(ctx, r, m.Digest)
		if err != nil {
			return models.Action{}, err
		}
		st.Resources[r.ID] = m
		return models.Action{Resource: r.ID, Action: act, Digest: m.Digest, Detail: "command " + r.Command[0]}, nil
	}
	return models.Action{}, fmt.Errorf("unknown kind %q", r.Kind)
}

// usersOf names the services that come after a resource, for the journal.
func (a *Agent) usersOf(id string) string {
	if a.current == nil {
		return ""
	}
	s := ""
	for _, r := range a.current.Resources {
		for _, x := range r.After {
			if x == id && r.Kind == "service" {
				if s != "" {
					s += ", "
				}
				s += r.ID
			}
		}
	}
	return s
}

func sortedIDs(m map[string]*Managed) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
