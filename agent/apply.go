package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

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
	before := make([]Managed, 0, len(st.Resources)) // what the machine had, for step 3's words
	for _, id := range sortedIDs(st.Resources) {
		before = append(before, *st.Resources[id])
	}
	gone := map[string]bool{} // paths of away removed before their turn (clearInTheWay)
	var actions []models.Action

	// 0. Every tree that changes is fetched and unpacked beside what runs
	// now: an archive refused (an escape, too large) or not fetched ends
	// the apply before anything on the machine changed — no service
	// stopped, no file written — so a refused declaration is refused whole.
	var changing []string // the paths of the trees that change
	for _, r := range ordered {
		if r.Kind == "tree" {
			if prev := st.Resources[r.ID]; prev == nil || prev.Digest != r.Artifact.Digest || !a.root.treeLive(r.Path, r.Artifact.Digest) {
				changing = append(changing, r.Path)
			}
		}
	}
	// Trees that take a real directory (not yet a link of mesh's): what
	// mesh has in it goes first, even what is declared again there.
	var takesDir []string
	for _, t := range changing {
		if fi, err := a.root.root.Lstat(rel(t)); err == nil && fi.IsDir() {
			takesDir = append(takesDir, t)
		}
	}
	away := goingAway(st, claimed, takesDir)
	for _, r := range ordered {
		if r.Kind != "tree" || !slices.Contains(changing, r.Path) {
			continue
		}
		if inTheWay(r.Path, away) || slices.ContainsFunc(changing, func(p string) bool { return beneath(r.Path, p) }) {
			// A file or tree of mesh's that goes away stands in its way
			// (above it: staged here, it would be unpacked through the old
			// tree's link into what is about to be removed; or beneath
			// it), or it lies in a tree of the declaration that changes
			// (staged now, it would land where that tree's new link is
			// not). It is fetched and its archive judged by unpacking it
			// aside, so a refusal still changes nothing; it is unpacked in
			// place in step 2, once what is in its way is gone.
			blob, err := a.client.fetchBlob(ctx, a.cfg.StateDir, r.Artifact.Digest, r.Artifact.Size)
			if err == nil {
				err = judgeTree(a.cfg.StateDir, blob, a.cfg.Unpack)
			}
			if err == nil {
				err = a.root.freeOnceGone(r.Path, away, a.filesBefore[r.Path])
			}
			if err != nil {
				return nil, &resourceFailed{id: r.ID, err: fmt.Errorf("%s: %w", r.ID, err)}
			}
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
		// A unit a declared file writes is that file's, not a stray.
		for _, id := range sv.Strays(func(id string) bool { return kinds[id] == "service" || claimed[unitPath(id)] != "" }) {
			if err := a.services.Stop(ctx, id); err != nil {
				return actions, fmt.Errorf("stopping %s: %w", id, err)
			}
			actions = append(actions, models.Action{Resource: id, Action: "removed",
				Detail: "stopped: started by an apply this host did not live to record"})
		}
	}

	// 2. Everything named, in order. What a resource leaves behind at its
	// old path (moved) is removed once every resource is in place, so a
	// service is restarted on the new files before the old go.
	digests := map[string]string{}
	units := -1 // the last action on a unit file: systemd must reload
	var moves []*Managed
	removeMoved := func() error {
		for _, m := range moves {
			if gone[m.Path] {
				continue
			}
			if err := a.removeManaged(m, claimed); err != nil {
				return fmt.Errorf("removing the old %s at %s: %w", m.Kind, m.Path, err)
			}
		}
		moves = nil
		return nil
	}
	for _, r := range ordered {
		prev := st.Resources[r.ID]
		wasUnit := prev != nil && prev.Kind == "file" && isUnitFile(prev.Path) && (prev.Path != r.Path || r.Kind != "file")
		if err := a.clearInTheWay(r, away, gone); err != nil {
			_ = removeMoved()
			return actions, &resourceFailed{id: r.ID, err: fmt.Errorf("%s: %w", r.ID, err)}
		}
		act, moved, err := a.applyOne(ctx, r, st, digests, claimed)
		if err != nil {
			// What moved before this one is removed as it was: the state
			// no longer names its old path, so nothing else would.
			_ = removeMoved()
			return actions, &resourceFailed{id: r.ID, err: fmt.Errorf("%s: %w", r.ID, err)}
		}
		if moved != nil {
			moves = append(moves, moved)
		}
		if (r.Kind == "file" && isUnitFile(r.Path) && act.Action != "unchanged") || (wasUnit && act.Action != "unchanged") {
			// Owed from now: an apply that fails after writing it finds
			// it unchanged when it runs again.
			units, a.reloadPending = len(actions), true
		}
		actions = append(actions, act)
	}
	if err := removeMoved(); err != nil {
		return actions, err
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
			act.Action, act.Detail = forgottenWords(m, before, away, changing, claimed, kinds)
			if by := claimed[m.Path]; by != "" && m.Kind == "tree" && kinds[by] != "tree" {
				// A file took the forgotten tree's path: its versions,
				// reachable from no link, go.
				if err := a.root.removeVersions(m.Path); err != nil {
					return actions, fmt.Errorf("removing %s: %w", id, err)
				}
			}
		} else if by := claimed[m.Path]; by != "" && m.Kind != models.ResourceCertificate {
			// A resource renamed (or its module) at the same path: step 2
			// wrote the new one there, and removing the old would delete it.
			act.Action, act.Detail = "forgotten", m.Path+" is "+by+"'s now"
			if m.Kind == "tree" && kinds[by] != "tree" {
				// A file took the tree's path: its unpacked versions,
				// named by nothing now, go.
				if err := a.root.removeVersions(m.Path); err != nil {
					return actions, fmt.Errorf("removing %s: %w", id, err)
				}
			}
		} else if gone[m.Path] && m.Kind != models.ResourceCertificate {
			act.Detail = m.Path // removed in step 2, out of another's way
		} else {
			if err := a.removeManaged(m, claimed); err != nil {
				return actions, fmt.Errorf("removing %s: %w", id, err)
			}
			act.Detail = m.Path
		}
		if m.Kind == "file" && isUnitFile(m.Path) && act.Action == "removed" {
			units, a.reloadPending = len(actions), true
		}
		delete(st.Resources, id)
		a.renewals.renewed(id) // no longer declared: no renewal of it to fail
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

// applyOne applies one resource; when it moved (a new path or kind), it
// returns what the old one left for the caller to remove once every
// resource is in place.
func (a *Agent) applyOne(ctx context.Context, r models.Resource, st *State, digests, claimed map[string]string) (models.Action, *Managed, error) {
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
		return act, nil, err
	}
	if by := claimed[moved.Path]; by != "" && moved.Kind != models.ResourceCertificate {
		// Its old path is another resource's now (two swapped paths, or
		// one took the other's): that one's content stays.
		act.Detail += " (moved from " + moved.Path + ", " + by + "'s now)"
		if moved.Kind == "tree" && r.Kind != "tree" && by == r.ID {
			// A file took the tree's own path: its unpacked versions,
			// named by nothing now, go.
			if err := a.root.removeVersions(moved.Path); err != nil {
				return act, nil, err
			}
		}
		return act, nil, nil
	}
	act.Detail += " (moved from " + moved.Path + ")"
	return act, moved, nil
}

// forgottenWords say what became of a resource forgotten (on_remove
// forget): left in place, or — lying in a tree's path, which lives in the
// tree's version — gone with the tree's removal, with a file taking its
// path, or with its new version; judged from what the apply does, not
// from what is on disk at its turn (a tree not yet removed still holds
// it; a new version may hold a file of its own there).
func forgottenWords(m *Managed, before []Managed, away []*Managed, changing []string, claimed, kinds map[string]string) (string, string) {
	if by := claimed[m.Path]; by != "" && m.Kind != models.ResourceCertificate {
		return "forgotten", m.Path + " is " + by + "'s now"
	}
	for _, t := range before {
		if t.Kind != "tree" || !beneath(m.Path, t.Path) {
			continue
		}
		by := claimed[t.Path]
		switch {
		case by == "" && slices.ContainsFunc(away, func(x *Managed) bool { return x.Kind == "tree" && x.Path == t.Path }):
			return "removed", "forgotten, but it lay in the tree at " + t.Path + ", which went, and it with it"
		case by != "" && kinds[by] != "tree":
			return "removed", "forgotten, but it lay in the tree at " + t.Path + ", whose path " + by + " took"
		case by != "" && slices.Contains(changing, t.Path):
			return "removed", "forgotten, but it lay in the tree at " + t.Path + ", whose new version replaced the one it was in"
		case by != "":
			return "forgotten", "left in place at " + m.Path + ", inside the tree at " + t.Path + ": it goes with that tree's next version"
		}
	}
	return "forgotten", "left in place at " + m.Path
}

// goingAway are the files and trees mesh put on the machine whose paths
// the declaration being applied gives no resource: each is removed by this
// apply (named no more, or moved), unless forgotten. Outermost first.
func goingAway(st *State, claimed map[string]string, takesDir []string) []*Managed {
	var out []*Managed
	// inChanging: beneath a tree that takes a real directory, what is
	// declared again is written after the tree (order), so it goes from
	// the directory as well: a directory holding only it is the tree's.
	inChanging := func(p string) bool {
		return slices.ContainsFunc(takesDir, func(t string) bool { return beneath(p, t) })
	}
	for _, id := range sortedIDs(st.Resources) {
		m := st.Resources[id]
		if m.OnRemove == "forget" {
			continue
		}
		switch {
		case (m.Kind == "file" || m.Kind == "tree") && (claimed[m.Path] == "" || inChanging(m.Path)):
			c := *m
			out = append(out, &c)
		case m.Kind == models.ResourceCertificate && m.Resource != nil:
			// A certificate's chain and key are files of mesh's like any.
			for _, p := range []string{m.Resource.Path, m.Resource.KeyPath} {
				if claimed[p] == "" || inChanging(p) {
					out = append(out, &Managed{Kind: "file", Module: m.Module, Path: p})
				}
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Path) < len(out[j].Path) })
	return out
}

// beneath says whether path p lies in the directory dir (the rule a tree's
// contents are ordered by, models.WithinTree).
func beneath(p, dir string) bool { return models.WithinTree(dir, p) }

// inTheWay says whether one of away lies above p or beneath it.
func inTheWay(p string, away []*Managed) bool {
	for _, m := range away {
		if beneath(p, m.Path) || beneath(m.Path, p) {
			return true
		}
	}
	return false
}

// markGone records m as removed, and with a tree what lay inside it: a
// tree unpacked through its link, or a file written there, went with it.
func markGone(m *Managed, away []*Managed, gone map[string]bool) {
	gone[m.Path] = true
	if m.Kind != "tree" {
		return
	}
	for _, x := range away {
		if beneath(x.Path, m.Path) {
			gone[x.Path] = true
		}
	}
}

// clearInTheWay removes, before r is applied, what goes away and stands
// where r needs the path: a file or tree of mesh's at a directory above
// r's paths (a file moved from /etc/app to /etc/app/app.conf could never
// be written; one written beneath an old tree's link landed in the version
// removed with it), and mesh's files and trees beneath its paths, then the
// directories they leave empty. gone records what it removed, so its
// turn later does not remove what took its place.
func (a *Agent) clearInTheWay(r models.Resource, away []*Managed, gone map[string]bool) error {
	for _, p := range resourcePaths(r) {
		// Outermost first: removing a tree removes what was inside it.
		for _, m := range away {
			if gone[m.Path] || !beneath(p, m.Path) {
				continue
			}
			if err := a.removeManaged(m, nil); err != nil {
				return fmt.Errorf("removing %s, which goes away, from above %s: %w", m.Path, p, err)
			}
			markGone(m, away, gone)
			a.reloadPending = a.reloadPending || (m.Kind == "file" && isUnitFile(m.Path))
		}
		for _, m := range away {
			if gone[m.Path] || !beneath(m.Path, p) {
				continue
			}
			if err := a.removeManaged(m, nil); err != nil {
				return fmt.Errorf("removing %s, which goes away, from beneath %s: %w", m.Path, p, err)
			}
			markGone(m, away, gone)
			a.reloadPending = a.reloadPending || (m.Kind == "file" && isUnitFile(m.Path))
			// The directories it leaves empty, up to p: a person's file
			// in one keeps it, and p is then refused as a directory.
			for d := path.Dir(m.Path); len(d) >= len(p) && strings.HasPrefix(d, p); d = path.Dir(d) {
				// A real directory only: a symlink (a person's, that
				// mesh's file was written through) is removed whatever
				// its target holds.
				if fi, err := a.root.root.Lstat(rel(d)); err != nil || !fi.IsDir() || a.root.root.Remove(rel(d)) != nil {
					break
				}
			}
		}
	}
	return nil
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
		m.Resource, m.Send = &rc, a.applyingSend
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
