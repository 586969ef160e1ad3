package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
)

// machineRoot maps declared absolute paths under the host's --root and
// writes through os.Root, so a planted symlink cannot lead a write out.
type machineRoot struct {
	dir  string // the --root directory ("/" in production)
	root *os.Root
}

func openMachineRoot(dir string) (*machineRoot, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", dir, err)
	}
	return &machineRoot{dir: dir, root: r}, nil
}

// rel turns a declared absolute path into one relative to the root.
func rel(p string) string { return strings.TrimPrefix(path.Clean(p), "/") }

// host is the path as the host's own processes see it.
func (m *machineRoot) host(p string) string { return hostPath(m.dir, p) }

func hostPath(rootDir, p string) string {
	if rootDir == "/" {
		return p
	}
	return strings.TrimRight(rootDir, "/") + p
}

// hostCommand is a declared command as the host runs it.
type hostCommand struct {
	Path string   // argv[0], mapped under --root
	Args []string // the declared arguments, passed as written
	Dir  string   // --root
	Env  []string // PATH, MESH_ROOT, then the declared env by name
}

// command is the one rule by which a declared command becomes a process,
// whoever runs it: a service's command (own supervisor or systemd unit)
// and its exec check alike. argv[0] is a declared path: absolute, mapped
// under --root like every path (checkResources has already held it to the
// allowed roots); the arguments are passed as written; it runs in --root
// with MESH_ROOT set to it, a fixed PATH and the service's env. A check
// that ran its command another way than the service could fail while the
// service ran fine (or pass on a binary the service never runs).
func (m *machineRoot) command(argv []string, env map[string]string) (hostCommand, error) {
	return commandUnder(m.dir, argv, env)
}

func commandUnder(rootDir string, argv []string, env map[string]string) (hostCommand, error) {
	if len(argv) == 0 || !path.IsAbs(argv[0]) {
		return hostCommand{}, fmt.Errorf("command %q: the first word must be an absolute path", argv)
	}
	return hostCommand{Path: hostPath(rootDir, argv[0]), Args: argv[1:], Dir: rootDir, Env: serviceEnv(rootDir, env)}, nil
}

// cmd is the command ready to start; ctx ends it (context.Background for
// a service, which outlives the call).
func (c hostCommand) cmd(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Dir, cmd.Env = c.Dir, c.Env
	return cmd
}

func randSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeFile writes content at declared path p atomically (temp + rename in
// the same directory) with mode.
func (m *machineRoot) writeFile(p string, content []byte, mode fs.FileMode) error {
	r := rel(p)
	if err := m.root.MkdirAll(path.Dir(r), 0o755); err != nil {
		return err
	}
	if fi, err := m.root.Lstat(r); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	tmp := path.Join(path.Dir(r), "."+path.Base(r)+".mesh-"+randSuffix())
	f, err := m.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer m.root.Remove(tmp)
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return m.root.Rename(tmp, r)
}

// fileMatches reports whether the file at p has exactly this content and mode.
func (m *machineRoot) fileMatches(p string, content []byte, mode fs.FileMode) bool {
	r := rel(p)
	fi, err := m.root.Lstat(r)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != mode.Perm() || fi.Size() != int64(len(content)) {
		return false
	}
	b, err := m.root.ReadFile(r)
	return err == nil && string(b) == string(content)
}

// remove removes the file or link at p; a directory there now is what
// took its place (something declared beneath it), and is left.
func (m *machineRoot) remove(p string) error {
	if fi, err := m.root.Lstat(rel(p)); err == nil && fi.IsDir() {
		return nil
	}
	err := m.root.Remove(rel(p))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
