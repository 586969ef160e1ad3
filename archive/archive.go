// Package archive holds the rules a tree's archive (a tar.gz) is read
// under: which entries a host refuses to unpack — one that escapes the
// tree, a device file, an archive past its ceilings — judged from the
// entry headers alone. The host applies them as it unpacks; the controller
// applies the same rules when a build's artifact is uploaded, so an
// archive every host would refuse is refused then, with why, rather than
// found by the canary.
package archive

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Limits are the ceilings a tree's archive is unpacked under, so an
// archive that expands far past what it claims (a gzip bomb, a million
// empty entries) is refused before it fills the disk. Each is checked
// against the entry headers before an entry's bytes are written: the tar
// reader holds every entry to the size its header gives.
type Limits struct {
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

// DefaultLimits are the ceilings `mesh-host run` uses unless told.
func DefaultLimits() Limits {
	return Limits{MaxBytes: 4 << 30, MaxEntries: 200_000, MaxFileBytes: 1 << 30, MaxRatio: 100}
}

// Defaults fills each ceiling left at zero with its default.
func (l *Limits) Defaults() {
	d := DefaultLimits()
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

// Budget is what an archive of size bytes may unpack in total: the
// smaller of MaxBytes and MaxRatio times its size (at least RatioFloor).
func (l Limits) Budget(size int64) (int64, string) {
	// size*MaxRatio cannot overflow below MaxBytes/MaxRatio.
	if size < l.MaxBytes/l.MaxRatio {
		if b := max(size*l.MaxRatio, RatioFloor); b < l.MaxBytes {
			return b, fmt.Sprintf("%d times the artifact's %d bytes", l.MaxRatio, size)
		}
	}
	return l.MaxBytes, fmt.Sprintf("the ceiling of %d bytes", l.MaxBytes)
}

// A Refusal is an archive refused by these rules: the same bytes would be
// refused again, so retrying cannot help. TooLarge tells a ceiling passed
// from an entry that escapes or cannot be unpacked.
type Refusal struct {
	Why      string
	TooLarge bool
}

func (r *Refusal) Error() string { return r.Why }

func escapes(format string, a ...any) error { return &Refusal{Why: fmt.Sprintf(format, a...)} }

func tooLarge(format string, a ...any) error {
	return &Refusal{Why: fmt.Sprintf(format, a...), TooLarge: true}
}

// An Entry is one entry of an archive that passed the rules: Name is its
// cleaned name inside the tree, Link a hardlink's cleaned target.
type Entry struct {
	Header *tar.Header
	Name   string
	Link   string
}

// Walk reads the tar.gz r of size bytes under limits and calls each for
// every entry that passes the rules, in order, with the tar reader
// positioned at its bytes. It stops at the first refusal (a *Refusal) or
// error of each's.
func Walk(r io.Reader, size int64, limits Limits, each func(e Entry, body io.Reader) error) error {
	limits.Defaults()
	budget, budgetWhy := limits.Budget(size)
	gz, err := gzip.NewReader(r)
	if err != nil {
		return escapes("not a tar.gz: %v", err)
	}
	tr := tar.NewReader(gz)
	entries := 0
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return escapes("reading archive: %v", err)
		}
		if entries++; entries > limits.MaxEntries {
			return tooLarge("more than %d entries", limits.MaxEntries)
		}
		if h.Typeflag == tar.TypeReg {
			if h.Size > limits.MaxFileBytes {
				return tooLarge("%s is %d bytes, over the per-file ceiling of %d", h.Name, h.Size, limits.MaxFileBytes)
			}
			if total += h.Size; total > budget {
				return tooLarge("unpacks to more than %d bytes (%s) at %s", budget, budgetWhy, h.Name)
			}
		}
		name, err := EntryName(h.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		e := Entry{Header: h, Name: name}
		switch h.Typeflag {
		case tar.TypeDir, tar.TypeReg:
		case tar.TypeSymlink:
			if len(h.Linkname) > MaxName {
				return escapes("symlink %s points to a name of %d bytes, over the %d a host can make", h.Name, len(h.Linkname), MaxName)
			}
			if path.IsAbs(h.Linkname) {
				return escapes("symlink %s points to the absolute path %s, outside the tree", h.Name, h.Linkname)
			}
			if t := path.Join(path.Dir(name), h.Linkname); t == ".." || strings.HasPrefix(t, "../") {
				return escapes("symlink %s → %s leaves the tree", h.Name, h.Linkname)
			}
		case tar.TypeLink:
			if e.Link, err = EntryName(h.Linkname); err != nil {
				return escapes("hardlink %s → %s leaves the tree", h.Name, h.Linkname)
			}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return escapes("%s is a device file", h.Name)
		case tar.TypeXGlobalHeader, tar.TypeXHeader:
			continue
		default:
			return escapes("%s has unsupported type %q", h.Name, h.Typeflag)
		}
		if err := each(e, tr); err != nil {
			return err
		}
	}
}

// Longest names a host can make: Linux's PATH_MAX for a whole name or a
// link's target, NAME_MAX for one component. Checked before anything
// else is done with a name, so a megabyte name costs nothing to refuse
// (one of 1 MiB a thousand times over was seconds of CPU to split).
const (
	MaxName      = 4096
	MaxComponent = 255
)

// EntryName cleans an archive entry name and refuses ones that escape.
func EntryName(n string) (string, error) {
	if len(n) > MaxName {
		return "", escapes("entry %.64s… is a name of %d bytes, over the %d a host can make", n, len(n), MaxName)
	}
	if path.IsAbs(n) || strings.HasPrefix(n, "/") {
		return "", escapes("entry %s has an absolute path", n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", escapes("entry %s contains ..", n)
		}
		if len(part) > MaxComponent {
			return "", escapes("entry %.64s… has a name of %d bytes in it, over the %d a host can make", n, len(part), MaxComponent)
		}
		// Where a host keeps the unpacked versions of a tree declared
		// beneath this one (.NAME.mesh beside NAME): an entry there stood
		// as that tree's version, and the host, finding it, never
		// unpacked the inner tree's own verified artifact.
		if len(part) > len(".x.mesh")-1 && strings.HasPrefix(part, ".") && strings.HasSuffix(part, ".mesh") {
			return "", escapes("entry %s lies in %s, where a host keeps the unpacked versions of a tree declared beneath this one", n, part)
		}
	}
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", escapes("entry %s escapes", n)
	}
	return c, nil
}

// Judge is Walk for one who does not unpack: it also follows the shape
// the entries make — which names are files, directories or links — and
// refuses what a host's unpacking would fail on though each entry alone
// passes: a name given twice, a name beneath a file, a hardlink to a name
// not given before it (or to a directory). Beneath a symlink the shape is
// the host's to find out: nothing there is judged by shape.
func Judge(r io.Reader, size int64, limits Limits) error {
	const (
		isFile = iota + 1
		isDir
		isLink // a symlink
	)
	shape := map[string]int{}
	// parents makes name's ancestors directories, as a host's MkdirAll
	// does; it says whether name lies beneath a symlink (unjudged).
	parents := func(name string) (beneathLink bool, err error) {
		dir := path.Dir(name)
		if dir == "." {
			return false, nil
		}
		parts := strings.Split(dir, "/")
		for i := range parts {
			p := strings.Join(parts[:i+1], "/")
			switch shape[p] {
			case isLink:
				return true, nil
			case isFile:
				return false, escapes("entry %s lies beneath %s, a file: no host can unpack it", name, p)
			case 0:
				shape[p] = isDir
			}
		}
		return false, nil
	}
	// beneathLink says whether one of name's ancestors is a symlink.
	beneathLink := func(name string) bool {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if shape[dir] == isLink {
				return true
			}
		}
		return false
	}
	return Walk(r, size, limits, func(e Entry, _ io.Reader) error {
		beneath, err := parents(e.Name)
		if err != nil || beneath {
			return err
		}
		was := shape[e.Name]
		switch e.Header.Typeflag {
		case tar.TypeDir:
			if was == isFile {
				return escapes("entry %s is a directory and, before it, a file: no host can unpack it", e.Name)
			}
			if was == 0 {
				shape[e.Name] = isDir
			}
		case tar.TypeReg, tar.TypeSymlink:
			if was != 0 {
				return escapes("entry %s is given twice: no host can unpack it (the name exists by then)", e.Name)
			}
			shape[e.Name] = isFile
			if e.Header.Typeflag == tar.TypeSymlink {
				shape[e.Name] = isLink
			}
		case tar.TypeLink:
			if was != 0 {
				return escapes("entry %s is given twice: no host can unpack it (the name exists by then)", e.Name)
			}
			if beneathLink(e.Link) || shape[e.Link] == isLink {
				// What it names is the host's to find (a hardlink to a
				// symlink is a symlink): nothing beneath it is judged.
				shape[e.Name] = isLink
				return nil
			}
			switch shape[e.Link] {
			case 0:
				return escapes("hardlink %s → %s names no file given before it: no host can unpack it", e.Name, e.Header.Linkname)
			case isDir:
				return escapes("hardlink %s → %s names a directory: no host can unpack it", e.Name, e.Header.Linkname)
			}
			shape[e.Name] = isFile
		}
		return nil
	})
}
