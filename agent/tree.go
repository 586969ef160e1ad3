package agent

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
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

// UnpackLimits are the ceilings a tree's archive is unpacked under, so an
// archive that expands far past what it claims (a gzip bomb, a million
// empty entries) is refused before it fills the disk. Each is checked
// against the entry headers before an entry's bytes are written: the tar
// reader holds every entry to the size its header gives.
type UnpackLimits struct {
	// MaxBytes caps the total bytes of the regular files unpacked.
	MaxBytes int64
	// MaxEntries caps the number of entries (files, directories, links).
	MaxEntries int
	// MaxFileBytes caps any one regular file.
	MaxFileBytes int64
	// MaxRatio caps the total bytes unpacked as a multiple of the
	// artifact's own size; the first RatioFloor bytes are always allowed,
	// so a tiny archive of text is not refused for compressing well.
	MaxRatio int64
}

// RatioFloor is what an archive may always unpack, whatever its ratio.
const RatioFloor = 1 << 20

// DefaultUnpackLimits are the ceilings `mesh-host run` uses unless told.
func DefaultUnpackLimits() UnpackLimits {
	return UnpackLimits{MaxBytes: 4 << 30, MaxEntries: 200_000, MaxFileBytes: 1 << 30, MaxRatio: 100}
}

func (l *UnpackLimits) defaults() {
	d := DefaultUnpackLimits()
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = d.MaxEntries
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxRatio <= 0 {
		l.MaxRatio = d.MaxRatio
	}
}

// budget is what an archive of size bytes may unpack in total: the
// smaller of MaxBytes and MaxRatio times its size (at least RatioFloor).
func (l UnpackLimits) budget(size int64) (int64, string) {
	// size*MaxRatio cannot overflow below MaxBytes/MaxRatio.
	if size < l.MaxBytes/l.MaxRatio {
		if b := max(size*l.MaxRatio, RatioFloor); b < l.MaxBytes {
			return b, fmt.Sprintf("%d times the artifact's %d bytes", l.MaxRatio, size)
		}
	}
	return l.MaxBytes, fmt.Sprintf("the ceiling of %d bytes", l.MaxBytes)
}

// installTree unpacks the tar.gz at archive for declared path p, under
// limits, and swaps it in. It returns the number of regular files.
func (m *machineRoot) installTree(p, digest, archive string, limits UnpackLimits) (int, error) {
	files, err := m.stageTree(p, digest, archive, limits, true)
	if err != nil {
		return 0, err
	}
	r := rel(p)
	if fi, err := m.root.Lstat(r); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		return 0, fmt.Errorf("%s exists and is not a tree mesh manages (not a symlink); move it away first", p)
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
	if fi, err := m.root.Lstat(rel(p)); err == nil && fi.Mode()&fs.ModeSymlink == 0 && !(mine && fi.Mode().IsRegular()) {
		return 0, fmt.Errorf("%s exists and is not a tree mesh manages (not a symlink); move it away first", p)
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

func (m *machineRoot) removeTree(p string) error {
	if err := m.remove(p); err != nil {
		return err
	}
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
func (m *machineRoot) unpack(dir, archive string, limits UnpackLimits) (int, error) {
	limits.defaults()
	f, err := os.Open(archive)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	budget, budgetWhy := limits.budget(fi.Size())
	gz, err := gzip.NewReader(f)
	if err != nil {
		return 0, escapeErr("not a tar.gz: %v", err)
	}
	root, err := m.root.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	tr := tar.NewReader(gz)
	files, entries := 0, 0
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, linksStayInside(root)
		}
		if err != nil {
			return files, escapeErr("reading archive: %v", err)
		}
		if entries++; entries > limits.MaxEntries {
			return files, tooLargeErr("more than %d entries", limits.MaxEntries)
		}
		if h.Typeflag == tar.TypeReg {
			if h.Size > limits.MaxFileBytes {
				return files, tooLargeErr("%s is %d bytes, over the per-file ceiling of %d", h.Name, h.Size, limits.MaxFileBytes)
			}
			if total += h.Size; total > budget {
				return files, tooLargeErr("unpacks to more than %d bytes (%s) at %s", budget, budgetWhy, h.Name)
			}
		}
		name, err := entryName(h.Name)
		if err != nil {
			return files, err
		}
		if name == "." {
			continue
		}
		if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
			return files, err
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return files, err
			}
			_ = root.Chmod(name, mode|0o700)
		case tar.TypeReg:
			out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return files, fmt.Errorf("%s: %w", h.Name, err)
			}
			// The tar reader yields exactly h.Size bytes (or fails), so the
			// header checks above bound what this writes.
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return files, err
			}
			_ = root.Chmod(name, mode)
			files++
		case tar.TypeSymlink:
			if path.IsAbs(h.Linkname) {
				return files, escapeErr("symlink %s points to the absolute path %s, outside the tree", h.Name, h.Linkname)
			}
			if t := path.Join(path.Dir(name), h.Linkname); t == ".." || strings.HasPrefix(t, "../") {
				return files, escapeErr("symlink %s → %s leaves the tree", h.Name, h.Linkname)
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return files, err
			}
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil {
				return files, escapeErr("hardlink %s → %s leaves the tree", h.Name, h.Linkname)
			}
			if err := root.Link(target, name); err != nil {
				return files, escapeErr("hardlink %s → %s: %v", h.Name, h.Linkname, err)
			}
			files++
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return files, escapeErr("%s is a device file", h.Name)
		case tar.TypeXGlobalHeader, tar.TypeXHeader:
		default:
			return files, escapeErr("%s has unsupported type %q", h.Name, h.Typeflag)
		}
	}
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

// entryName cleans an archive entry name and refuses ones that escape.
func entryName(n string) (string, error) {
	if path.IsAbs(n) || strings.HasPrefix(n, "/") {
		return "", escapeErr("entry %s has an absolute path", n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", escapeErr("entry %s contains ..", n)
		}
	}
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", escapeErr("entry %s escapes", n)
	}
	return c, nil
}

// escapeErr is an archive the host refuses (not a failure to retry).
func escapeErr(format string, a ...any) error { return refuse("escape: "+format, a...) }

// tooLargeErr is an archive past an unpack ceiling: refused like an escape
// (the same bytes would be refused again, so retrying cannot help).
func tooLargeErr(format string, a ...any) error {
	return refuse("too large: archive "+format, a...)
}
