package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"mesh/client"
)

func (a *app) buildsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "builds", Aliases: []string{"build"}, Short: "A module's builds"}
	var manifest, ver, commit string
	upload := &cobra.Command{
		Use:   "upload MODULE DIR --manifest FILE [--version V] [--commit C]",
		Short: "Upload a build: DIR, packed as a tar.gz, is its artifact",
		Long: `Upload a build of MODULE. DIR is packed as a tar.gz (regular files,
directories and symlinks, paths relative to DIR), which a 'tree' resource
without an 'artifact' unpacks; its sha256 is sent along, so the controller
refuses bytes that changed on the way. The manifest is the JSON
{"resources": [...]} of the build. A module's first build becomes current;
each later one starts a plan (meshctl plans watch ID).`,
		Example: `  meshctl builds upload node-tools ./dist --manifest manifest.json --version 1.4.2 --commit $(git rev-parse HEAD)`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.uploadBuild(cmd.Context(), args[0], args[1], manifest, ver, commit)
		},
	}
	upload.Flags().StringVar(&manifest, "manifest", "", "the manifest file (JSON)")
	upload.Flags().StringVar(&ver, "version", "", "the build's version")
	upload.Flags().StringVar(&commit, "commit", "", "the source commit it was built from")
	_ = upload.MarkFlagRequired("manifest")
	cmd.AddCommand(upload)
	a.buildListCommands(cmd)
	return cmd
}

func (a *app) uploadBuild(ctx context.Context, module, dir, manifestFile, ver, commit string) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	manifest, err := os.ReadFile(manifestFile)
	if err != nil {
		return err
	}
	art, err := os.CreateTemp("", "meshctl-artifact-*.tar.gz")
	if err != nil {
		return err
	}
	defer os.Remove(art.Name())
	defer art.Close()
	h := sha256.New()
	if err := packTree(dir, io.MultiWriter(art, h)); err != nil {
		return fmt.Errorf("packing %s: %w", dir, err)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if _, err := art.Seek(0, io.SeekStart); err != nil {
		return err
	}

	// The body is streamed: an artifact is never held whole in memory.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeBuildParts(mw, string(manifest), ver, commit, digest, art))
	}()
	r, err := c.CreateBuildWithBodyWithResponse(ctx, module, mw.FormDataContentType(), pr)
	pr.Close()
	if err != nil {
		return reach(err)
	}
	if err := expect(r.HTTPResponse, r.Body, http.StatusCreated, http.StatusOK); err != nil {
		return err
	}
	if a.jsonOut() {
		return a.printJSON(r.Body)
	}
	b := r.JSON201
	if r.JSON200 != nil {
		// The module's newest build holds this upload already (a retry):
		// nothing new was made, and its plan is the one that started then.
		b = r.JSON200
		fmt.Fprintf(a.errOut, "%s build %d (uploaded %s by %s) already holds this upload: no new build, no new plan\n",
			b.Module, b.Number, ago(&b.CreatedAt), b.CreatedBy)
	}
	if err := a.table([][]string{{"MODULE", "BUILD", "VERSION", "DIGEST", "SIZE"},
		{b.Module, strconv.Itoa(b.Number), b.Version, b.Digest, strconv.Itoa(b.Size)}}); err != nil {
		return err
	}
	// The answer is the build alone; its plan, if one started, is listed.
	limit := 20
	ps, err := c.ListPlansWithResponse(ctx, &client.ListPlansParams{Limit: &limit})
	if err == nil && ps.JSON200 != nil {
		for _, p := range ps.JSON200.Items {
			if p.Module == b.Module && p.Build == b.Number {
				fmt.Fprintf(a.out, "Plan %d: %s. Watch it: meshctl plans watch %d\n", p.Id, p.State, p.Id)
				return nil
			}
		}
	}
	return nil
}

func writeBuildParts(mw *multipart.Writer, manifest, ver, commit, digest string, artifact io.Reader) error {
	fields := [][2]string{{"manifest", manifest}, {"version", ver}, {"commit", commit}, {"digest", digest}}
	for _, f := range fields {
		if f[1] == "" {
			continue
		}
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return err
		}
	}
	w, err := mw.CreateFormFile("artifact", "artifact.tar.gz")
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, artifact); err != nil {
		return err
	}
	return mw.Close()
}

// packTree writes dir as a tar.gz: directories, regular files and
// symlinks, named relative to dir, in walk (lexical) order, without owner
// names or ids (the host does not use them). Anything else (a device, a
// socket) is an error rather than silently left out.
func packTree(dir string, w io.Writer) error {
	// The directory a link names (./current, nix's ./result): walked
	// through the link, its files were left out and an empty tree
	// uploaded — a build that empties its path on every machine.
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		case info.Mode().IsRegular(), info.IsDir():
		default:
			return fmt.Errorf("%s: cannot pack a %s", rel, info.Mode().Type())
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}
