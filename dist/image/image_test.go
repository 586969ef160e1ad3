package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// TestImage_Config builds the image tarball as `task release` does (the
// test's own executable stands in for the controller: building the real
// one for linux/arm64 is the release's job, not a test's) and reads it back
// as a runtime would: an OCI layout with one image whose config runs the
// controller as a user that is not root, with no shell to exec into.
func TestImage_Config(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "mesh-controller.oci.tar")
	if err := run(Options{Arch: "arm64", Version: "1.2.3"}, self, out); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	untar(t, out, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "mesh-controller:1.2.3" {
		t.Fatalf("index: %+v", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want OCI", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	t.Run("NotRoot", func(t *testing.T) {
		user, _, _ := strings.Cut(c.User, ":")
		if user == "" || user == "0" || user == "root" {
			t.Errorf("user %q runs as root", c.User)
		}
	})
	t.Run("Entrypoint", func(t *testing.T) {
		if !slices.Equal(c.Entrypoint, []string{"/usr/bin/mesh-controller"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
			t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
		}
		if cf.OS != "linux" || cf.Architecture != "arm64" || c.Labels["org.opencontainers.image.version"] != "1.2.3" {
			t.Errorf("platform %s/%s, labels %v", cf.OS, cf.Architecture, c.Labels)
		}
		if !slices.Contains(c.Env, "MESH_DATA_DIR=/var/lib/mesh-controller") {
			t.Errorf("env %q", c.Env)
		}
	})
	t.Run("NoShell", func(t *testing.T) {
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%d layers, %v: want one, on an empty base", len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		files := map[string]*tar.Header{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimSuffix(h.Name, "/")] = h
			switch path.Base(h.Name) {
			case "sh", "bash", "ash", "dash", "busybox":
				t.Errorf("the image holds a shell: %s", h.Name)
			}
		}
		bin := files["usr/bin/mesh-controller"]
		if bin == nil || bin.Mode&0o111 == 0 {
			t.Fatalf("no executable /usr/bin/mesh-controller in %v", files)
		}
		if data := files["var/lib/mesh-controller"]; data == nil || data.Uid == 0 || c.User != "65532:65532" || data.Uid != 65532 {
			t.Errorf("the data dir is not the user's: %+v", data)
		}
		for name, h := range files {
			if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 && name != "usr/bin/mesh-controller" {
				t.Errorf("an executable besides the controller: %s", name)
			}
		}
	})
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
