package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts. The user is numeric (65532, distroless's
// "nonroot"), so no runtime has to look a name up in /etc/passwd.
const (
	binaryPath = "/usr/bin/mesh-controller"
	dataDir    = "/var/lib/mesh-controller"
	uid        = 65532
	listen     = "0.0.0.0:8443"
)

// epoch dates every file and the image itself, so the same binary makes
// the same image digest.
var epoch = time.Unix(0, 0).UTC()

// Options says what to build.
type Options struct {
	Binary  []byte // the static linux mesh-controller
	Arch    string // amd64, arm64
	Version string
}

// Build makes the controller's image: the static binary on an empty base
// (no shell, no package manager, nothing but what the controller needs),
// run as a user that is not root, with its data dir a volume it owns.
func Build(o Options) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		b, err := rootfs(o.Binary)
		return io.NopCloser(bytes.NewReader(b)), err
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{binaryPath},
		Cmd:        []string{"serve"},
		Env: []string{
			"MESH_DATA_DIR=" + dataDir,
			// Off loopback the controller serves TLS under the mesh CA;
			// tell it the names hosts reach it by with MESH_ADVERTISE.
			"MESH_LISTEN=" + listen,
		},
		WorkingDir:   dataDir,
		ExposedPorts: map[string]struct{}{"8443/tcp": {}},
		Volumes:      map[string]struct{}{dataDir: {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "mesh-controller",
			"org.opencontainers.image.version": o.Version,
		},
		StopSignal: "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the image's one layer.
func rootfs(binary []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner, ModTime: epoch})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		// Names for the two users, for tools that print them; nothing
		// in the image needs them to run.
		func() error {
			return file("etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nmesh:x:%d:%d:mesh controller:%s:/sbin/nologin\n", uid, uid, dataDir))
		},
		func() error { return file("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nmesh:x:%d:\n", uid)) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/bin", 0o755, 0) },
		func() error { return file(binaryPath[1:], 0o755, binary) },
		func() error { return dir("var", 0o755, 0) },
		func() error { return dir("var/lib", 0o755, 0) },
		func() error { return dir(dataDir[1:], 0o700, uid) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteOCITar writes img as an OCI image layout, tarred into out (what
// `podman load`, `skopeo copy oci-archive:` and `crane push` take), tagged
// with ref.
func WriteOCITar(img v1.Image, ref, out string) error {
	tmp, err := os.MkdirTemp("", "mesh-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := tarDir(tmp, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tarDir tars the files under root, in lexical order with fixed times.
func tarDir(root string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(rel) + "/", Mode: 0o755, ModTime: epoch})
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
