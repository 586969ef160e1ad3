package agent

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mesh/archive"
	"mesh/models"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// A tree is swapped in atomically by a symlink flip: the declared path is
// a symlink to a directory named by the artifact digest, beside it in a
// hidden versions directory. The new version is unpacked into a temporary
// directory, renamed to its digest's name once complete, and the declared
// path is flipped to it by renaming a new symlink over the old one. A crash
// leaves either the old link or the new; half-unpacked temporaries are
// removed by recoverTree at start.

// versionsDir is where a tree's unpacked versions live: /opt/.node-tools.mesh.
func versionsDir(p string) string { return path.Join(path.Dir(p), "."+path.Base(p)+".mesh") }

// treeMayReplace says whether what is at declared path p may be replaced by
// a tree's link: nothing, a link mesh made for a tree there, or (mine) a
// file of mesh's. A symlink of a person's (a deploy tool's current →
// releases/v3) is not mesh's: taken for one, it was replaced, and removed
// with the tree later.
func (m *machineRoot) treeMayReplace(p string, mine bool) error {
	fi, err := m.root.Lstat(rel(p))
	switch {
	case err != nil:
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := m.root.Readlink(rel(p))
		dir, name, _ := strings.Cut(target, "/")
		if err == nil && dir == path.Base(versionsDir(p)) && models.ValidDigest("sha256:"+name) {
			return nil
		}
		return fmt.Errorf("%s is a symlink mesh did not make (to %q), not a tree mesh manages; move it away first", p, target)
	case mine && fi.Mode().IsRegular():
		return nil
	}
	return fmt.Errorf("%s exists and is not a tree mesh manages (not a symlink); move it away first", p)
}

// treeLive reports whether the declared path points at the version of digest.
func (m *machineRoot) treeLive(p, digest string) bool {
	target, err := m.root.Readlink(rel(p))
	if err != nil {
		return false
	}
	want := path.Base(versionsDir(p)) + "/" + strings.TrimPrefix(digest, "sha256:")
	if target != want {
		return false
	}
	fi, err := m.root.Stat(rel(p))
	return err == nil && fi.IsDir()
}

// UnpackLimits are the ceilings a tree's archive is unpacked under
// (archive.Limits: the controller judges an upload by the same rules).
type UnpackLimits = archive.Limits

// DefaultUnpackLimits are the ceilings `mesh-host run` uses unless told.
func DefaultUnpackLimits() UnpackLimits { return archive.DefaultLimits() }

// installTree unpacks the tar.gz at archive for declared path p, under
// limits, and swaps it in. It returns the number of regular files.
func (m *machineRoot) installTree(p, digest, archive string, limits UnpackLimits) (int, error) {
	files, err := m.stageTree(p, digest, archive, limits, true)
	if err != nil {
		return 0, err
	}
	r := rel(p)
	if err := m.treeMayReplace(p, false); err != nil {
		return 0, err
	}
	vdir := rel(versionsDir(p))
	name := strings.TrimPrefix(digest, "sha256:")
	link := path.Join(path.Dir(r), "."+path.Base(r)+".link-"+randSuffix())
	if err := m.root.Symlink(path.Base(vdir)+"/"+name, link); err != nil {
		return 0, err
	}
	if err := m.root.Rename(link, r); err != nil {
		_ = m.root.Remove(link)
		return 0, err
	}
	// The old versions are no longer named: remove them.
	if ents, err := fs.ReadDir(m.root.FS(), vdir); err == nil {
		for _, e := range ents {
			if e.Name() != name {
				_ = m.root.RemoveAll(path.Join(vdir, e.Name()))
			}
		}
	}
	return files, nil
}

// stageTree unpacks the tar.gz at archive into its version's directory
// beside declared path p's current one, if it is not there yet, and says
// how many files it holds; nothing at p changes. An apply stages every
// tree first, so an archive refused (an escape, too large), or a path
// held by what mesh does not manage, fails the declaration before
// anything changed. mine says a file of mesh's is at p: it may move away
// in the same apply, and the swap replaces it.
func (m *machineRoot) stageTree(p, digest, archive string, limits UnpackLimits, mine bool) (int, error) {
	if err := m.treeMayReplace(p, mine); err != nil {
		return 0, err
	}
	vdir := rel(versionsDir(p))
	if err := m.root.MkdirAll(vdir, 0o755); err != nil {
		return 0, err
	}
	m.recoverTree(p)
	name := strings.TrimPrefix(digest, "sha256:")
	final := path.Join(vdir, name)
	if _, err := m.root.Lstat(final); err == nil {
		return m.countFiles(final), nil
	}
	tmp := path.Join(vdir, "tmp-"+randSuffix())
	if err := m.root.Mkdir(tmp, 0o755); err != nil {
		return 0, err
	}
	n, err := m.unpack(tmp, archive, limits)
	if err != nil {
		_ = m.root.RemoveAll(tmp)
		return 0, err
	}
	if err := m.root.Rename(tmp, final); err != nil {
		_ = m.root.RemoveAll(tmp)
		return 0, err
	}
	return n, nil
}

// recoverTree removes what a crash mid-install left: temporary unpack
// directories and links that were never renamed into place.
func (m *machineRoot) recoverTree(p string) {
	vdir := rel(versionsDir(p))
	if ents, err := fs.ReadDir(m.root.FS(), vdir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "tmp-") {
				_ = m.root.RemoveAll(path.Join(vdir, e.Name()))
			}
		}
	}
	dir := path.Dir(rel(p))
	if dir == "" {
		dir = "."
	}
	if ents, err := fs.ReadDir(m.root.FS(), dir); err == nil {
		prefix := "." + path.Base(p) + ".link-"
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				_ = m.root.Remove(path.Join(dir, e.Name()))
			}
		}
	}
}

// freeOnceGone says, before anything changes, whether a tree may take
// path p once what goes away (away) is removed: what is at p is what
// treeMayReplace takes, or a directory holding only what goes away (and
// directories of it); beneath what goes away, p goes with it. What a
// person keeps there fails the declaration now, as staging it would.
func (m *machineRoot) freeOnceGone(p string, away []*Managed, mine bool) error {
	for _, x := range away {
		if beneath(p, x.Path) {
			return nil
		}
	}
	fi, err := m.root.Lstat(rel(p))
	if err != nil || !fi.IsDir() {
		return m.treeMayReplace(p, mine)
	}
	goes := map[string]bool{}
	goesDir := map[string]bool{} // a tree's link and versions: all mesh's
	for _, x := range away {
		goes[x.Path] = true
		if x.Kind == "tree" {
			goesDir[x.Path], goesDir[versionsDir(x.Path)] = true, true
		}
	}
	// holdsWhatGoes says whether a directory has something that goes away
	// beneath it: one that does not is a person's (mesh makes directories
	// only for what it puts there), empty or not.
	holdsWhatGoes := func(dir string) bool {
		for q := range goes {
			if beneath(q, dir) {
				return true
			}
		}
		return false
	}
	var theirs []string
	_ = fs.WalkDir(m.root.FS(), rel(p), func(q string, d fs.DirEntry, err error) error {
		switch abs := "/" + q; {
		case err != nil:
			theirs = append(theirs, abs)
		case goesDir[abs]:
			if d.IsDir() {
				return fs.SkipDir
			}
		case goes[abs] && !d.IsDir():
			// mesh's file, which goes: a directory at its path now is a
			// person's, looked into below.
		case d.IsDir() && abs != p && !holdsWhatGoes(abs):
			theirs = append(theirs, abs+"/")
			return fs.SkipDir
		case !d.IsDir():
			theirs = append(theirs, abs)
		}
		if len(theirs) >= 3 {
			return fs.SkipAll
		}
		return nil
	})
	if len(theirs) > 0 {
		return fmt.Errorf("%s is a directory holding what mesh does not manage (%s); move it away first", p, strings.Join(theirs, ", "))
	}
	return nil
}

// judgeTree unpacks the tar.gz at archive into a directory of its own
// under dir and removes it: what unpacking it in place would refuse (an
// escape, a ceiling) it refuses, without touching the machine. For a tree
// that cannot be staged beside its path before the apply changes anything
// (what is in its way goes only in step 2).
func judgeTree(dir, archive string, limits UnpackLimits) error {
	// What a judge cut short (the host killed) left: one apply at a time
	// judges, so any earlier one is done.
	if old, err := filepath.Glob(filepath.Join(dir, "judge-*")); err == nil {
		for _, o := range old {
			_ = os.RemoveAll(o)
		}
	}
	tmp, err := os.MkdirTemp(dir, "judge-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	r, err := openMachineRoot(tmp)
	if err != nil {
		return err
	}
	defer r.root.Close()
	_, err = r.unpack(".", archive, limits)
	return err
}

func (m *machineRoot) removeTree(p string) error {
	// Its link, if p still is one: a directory there now is what took the
	// tree's place (a file declared beneath it, written by an apply the
	// state did not live to record), not the tree, and is left.
	if fi, err := m.root.Lstat(rel(p)); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if err := m.remove(p); err != nil {
			return err
		}
	}
	return m.removeVersions(p)
}

// removeVersions removes a tree's unpacked versions (not what is at p).
func (m *machineRoot) removeVersions(p string) error {
	return m.root.RemoveAll(rel(versionsDir(p)))
}

func (m *machineRoot) countFiles(dir string) int {
	n := 0
	_ = fs.WalkDir(m.root.FS(), dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// unpack extracts a tar.gz into dir (relative to the root), refusing any
// entry that would escape it: "..", an absolute name, a symlink or hardlink
// whose target leaves the tree, a device file. Symlinks that stay inside
// are kept: real runtimes ship them. Every write goes through a Root
// opened at dir, so even a symlink made earlier cannot lead out. An archive
// past one of limits is refused at the first entry header that crosses it,
// before that entry's bytes are written.
func (m *machineRoot) unpack(dir, archivePath string, limits UnpackLimits) (int, error) {
	f, err := os.Open(archivePath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	root, err := m.root.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	files := 0
	err = archive.Walk(f, fi.Size(), limits, func(e archive.Entry, body io.Reader) error {
		h, name := e.Header, e.Name
		if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
			return err
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			_ = root.Chmod(name, mode|0o700)
		case tar.TypeReg:
			out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			// The tar reader yields exactly h.Size bytes (or fails), so the
			// header checks of archive.Walk bound what this writes.
			_, err = io.Copy(out, body)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			_ = root.Chmod(name, mode)
			files++
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := root.Link(e.Link, name); err != nil {
				return escapeErr("hardlink %s → %s: %v", h.Name, h.Linkname, err)
			}
			files++
		}
		return nil
	})
	if r := (*archive.Refusal)(nil); errors.As(err, &r) {
		if r.TooLarge {
			return files, tooLargeErr("%s", r.Why)
		}
		return files, escapeErr("%s", r.Why)
	}
	if err != nil {
		return files, err
	}
	return files, linksStayInside(root)
}

// linksStayInside refuses a tree with a symlink that, followed as the
// kernel would, leads out of it. Each symlink's own target is checked as it
// is unpacked, but only lexically: d/up → .. stays inside, and then
// d/up2 → up/.. looks like d yet is the tree's parent (found by FuzzUnpack).
// Links can be made in any order, so this runs once all are in place.
func linksStayInside(root *os.Root) error {
	return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return err
		}
		target, err := root.Readlink(p)
		if err != nil {
			return err
		}
		hops := 0
		if !resolvesInside(root, strings.Split(path.Dir(p), "/"), target, &hops) {
			return escapeErr("symlink %s → %s leads out of the tree through another symlink", p, target)
		}
		return nil
	})
}

// resolvesInside follows target from directory dir (components under the
// root) through the root's symlinks and reports whether it stays inside;
// a name that does not exist is taken lexically.
func resolvesInside(root *os.Root, dir []string, target string, hops *int) bool {
	_, inside := resolve(root, dir, target, hops)
	return inside
}

// resolve is resolvesInside that also returns where target leads. Past 40
// links it stops: the kernel says ELOOP there, so nothing is reached.
func resolve(root *os.Root, dir []string, target string, hops *int) ([]string, bool) {
	if *hops++; *hops > 40 {
		return nil, true
	}
	if path.IsAbs(target) {
		return nil, false
	}
	cur := []string{}
	for _, c := range dir {
		if c != "" && c != "." {
			cur = append(cur, c)
		}
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return nil, false
			}
			cur = cur[:len(cur)-1]
			continue
		}
		cur = append(cur, c)
		p := strings.Join(cur, "/")
		fi, err := root.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		next, err := root.Readlink(p)
		if err != nil {
			return nil, false
		}
		var inside bool
		if cur, inside = resolve(root, cur[:len(cur)-1], next, hops); !inside {
			return nil, false
		}
		if *hops > 40 {
			return nil, true
		}
	}
	return cur, true
}

// escapeErr is an archive the host refuses (not a failure to retry).
func escapeErr(format string, a ...any) error { return refuse("escape: "+format, a...) }

// tooLargeErr is an archive past an unpack ceiling: refused like an escape
// (the same bytes would be refused again, so retrying cannot help).
func tooLargeErr(format string, a ...any) error {
	return refuse("too large: archive "+format, a...)
}
