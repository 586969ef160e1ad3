package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"mesh/archive"
	"mesh/models"
	"mesh/store"
)

// UploadBuild is a build a person or CI uploads to a module.
type UploadBuild struct {
	Module   string
	Version  string
	Commit   string
	Manifest string
	// Digest, when given, must be the artifact's.
	Digest string
	// Artifact is the uploaded artifact, stored first (PutArtifact); nil
	// when the build has none.
	Artifact *models.Blob
	// OS and Arch: a mesh-host build names the platform of its binary.
	OS, Arch string
	// Schemas: a mesh-host build says which declaration schemas its binary
	// decodes ("1,2"), required for that kind (models.ParseReleaseSchemas).
	Schemas string
}

// Validate checks what can be checked without the store.
func (r *UploadBuild) Validate() error {
	if r.Manifest == "" {
		return models.Invalid("manifest", "required")
	}
	man, err := models.ParseManifest([]byte(r.Manifest))
	if err != nil {
		return err
	}
	if err := man.Buildable(r.Artifact != nil); err != nil {
		return err
	}
	if err := validBuildWords(r.Version, r.Commit, r.OS, r.Arch); err != nil {
		return err
	}
	if r.Artifact == nil && r.Digest != "" {
		return models.Invalid("digest", "given without an artifact")
	}
	if err := checkDigest(r.Artifact, r.Digest); err != nil {
		return err // the bytes are not those meant: said first
	}
	return treeUnpacks(man, r.Artifact)
}

// FinishBuild is a builder's artifact and manifest for a build it claimed.
type FinishBuild struct {
	ID       int64
	Manifest string
	Digest   string
	// Artifact is the uploaded artifact, stored first (PutArtifact).
	Artifact *models.Blob
	// Version, OS and Arch: a mesh-host build names its release.
	Version, OS, Arch string
	// Schemas: a mesh-host build says which declaration schemas its binary
	// decodes ("1,2"), required for that kind (models.ParseReleaseSchemas).
	Schemas string
}

// Validate checks what can be checked without the store. The manifest is
// the commit's own content and is judged by FinishBuild (a refusal ends
// the build failed).
func (r *FinishBuild) Validate() error {
	if err := validBuildWords(r.Version, "", r.OS, r.Arch); err != nil {
		return err
	}
	return checkDigest(r.Artifact, r.Digest)
}

func validBuildWords(version, commit, goos, arch string) error {
	if err := models.ValidVersion("version", version, false); err != nil {
		return err
	}
	if err := models.ValidCommit("commit", commit); err != nil {
		return err
	}
	if goos != "" || arch != "" {
		return models.ValidPlatform(goos, arch)
	}
	return nil
}

func checkDigest(artifact *models.Blob, given string) error {
	if artifact == nil || given == "" {
		return nil
	}
	if d := artifact.Digest; d != given {
		return fmt.Errorf("%w: the artifact's bytes are %s, the upload said %s", models.ErrDigestMismatch, d, given)
	}
	return nil
}

// PutArtifact streams an uploaded artifact (a build's, a host release's
// binary) into the store a chunk at a time and returns it, content-
// addressed, for the workflow that names it. It is stored before that
// workflow's transaction, which only names it: bytes a refused workflow
// leaves behind are named by nothing and swept (store.BlobGrace).
//
// It judges the bytes as they are stored by the rules a host unpacks a
// tree under (archive.Walk), so that a build whose tree every host would
// refuse — an entry whose name escapes it or no host can make, a device
// file, not a tar.gz — is refused at its upload rather than by its canary.
// The judge reads each entry's header alone (bounded: see judged), and
// the shape they make (a name given twice, a hardlink to nothing); what
// only unpacking tells — a symlink that leads out through another, what
// lies beneath a symlink — each host still refuses.
func (s *Service) PutArtifact(ctx context.Context, r io.Reader) (*models.Blob, error) {
	pr, pw := io.Pipe()
	verdict := make(chan error, 1)
	go func() {
		err := archive.Judge(pr, math.MaxInt64, judged)
		if r := (*archive.Refusal)(nil); errors.As(err, &r) && r.TooLarge {
			err = nil // past what is judged here: the hosts judge the rest
		}
		// The upload is never held by its judge: what follows the
		// archive's end, or a refused archive's rest, is read through.
		_, _ = io.Copy(io.Discard, pr)
		verdict <- err
	}()
	b, err := s.Store.PutBlob(ctx, io.TeeReader(r, pw))
	pw.CloseWithError(err)
	why := <-verdict
	if err != nil {
		return nil, err
	}
	if why != nil {
		b.TreeRefused = why.Error()
	}
	return b, nil
}

// judged bounds what the upload's judge reads of an archive (with a size
// of MaxInt64 its budget is MaxBytes): the entries before 1 GiB of
// content or the host's default count of them, so that an archive made to
// cost CPU to inflate (a gzip bomb) costs the controller a few seconds at
// most. Past them, and past any host's own ceilings, the judge says
// nothing: each host judges the archive whole as it unpacks it, and the
// ceilings are each host's setting.
var judged = archive.Limits{MaxBytes: 1 << 30, MaxEntries: archive.DefaultLimits().MaxEntries, MaxFileBytes: 1 << 30, MaxRatio: 1}

// treeUnpacks refuses a build one of whose trees unpacks its artifact
// when no host would unpack that artifact.
func treeUnpacks(man *models.Manifest, artifact *models.Blob) error {
	if artifact == nil || artifact.TreeRefused == "" {
		return nil
	}
	if tree := man.UnpacksArtifact(); tree != "" {
		return models.Invalid("artifact", fmt.Sprintf("tree %s unpacks the build's artifact, and every host would refuse it: %s", tree, artifact.TreeRefused))
	}
	return nil
}

// BuildResult is a stored build and what it set going.
type BuildResult struct {
	Build   *models.Build
	Module  *models.Module
	Plan    *models.PlanView
	Rollout *models.RolloutView
	// Same: the upload held what the module's newest build holds, so
	// nothing was made (store.Tx.UploadBuild); Build is that build.
	Same bool
}

// UploadBuild stores a build and what follows it (models.AfterBuild), in
// one transaction: a refusal leaves nothing behind. An upload of what the
// module's newest build already holds makes nothing (BuildResult.Same).
func (s *Service) UploadBuild(ctx context.Context, actor string, req *UploadBuild) (*BuildResult, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return store.Write(ctx, s.Store, func(tx *store.Tx) (*BuildResult, error) {
		b := &models.Build{Version: req.Version, Commit: req.Commit, Manifest: req.Manifest, CreatedBy: actor}
		if req.Artifact != nil {
			b.Digest, b.Size = req.Artifact.Digest, req.Artifact.Size
		}
		mod, same, err := tx.UploadBuild(actor, req.Module, b, req.Artifact)
		if err != nil {
			return nil, err
		}
		if same != nil {
			return &BuildResult{Build: same, Module: mod, Same: true}, nil
		}
		return s.follow(tx, actor, mod, b, req.Artifact, releaseOf{req.Version, req.OS, req.Arch, req.Schemas})
	})
}

// FinishBuild fills a claimed build and starts what follows it, in one
// transaction: a refusal of the request (a mesh-host build without its
// platform, say) commits nothing and the build stays leased to the
// builder, which may send it again corrected. A manifest that does not
// parse is the commit's own content, which no retry can fix: the build
// ends failed with the reason audited, and is never claimed again.
func (s *Service) FinishBuild(ctx context.Context, actor string, req *FinishBuild) (*BuildResult, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	man, perr := models.ParseManifest([]byte(req.Manifest))
	if perr == nil {
		perr = man.Buildable(req.Artifact != nil)
	}
	if perr == nil {
		perr = treeUnpacks(man, req.Artifact)
	}
	if perr != nil {
		err := s.Store.Write(ctx, func(tx *store.Tx) error { return tx.FailBuild(actor, req.ID, "manifest refused: "+perr.Error()) })
		return nil, errors.Join(perr, err)
	}
	return store.Write(ctx, s.Store, func(tx *store.Tx) (*BuildResult, error) {
		var digest string
		var size int64
		if req.Artifact != nil {
			digest, size = req.Artifact.Digest, req.Artifact.Size
		}
		b, mod, err := tx.FinishBuild(actor, req.ID, digest, size, req.Manifest, req.Artifact)
		if err != nil {
			return nil, err
		}
		return s.follow(tx, actor, mod, b, req.Artifact, releaseOf{req.Version, req.OS, req.Arch, req.Schemas})
	})
}

// releaseOf is what a mesh-host build says of the release it becomes.
type releaseOf struct{ version, os, arch, schemas string }

// follow starts what models.AfterBuild says follows b, inside tx.
func (s *Service) follow(tx *store.Tx, actor string, mod *models.Module, b *models.Build, artifact *models.Blob, rel releaseOf) (*BuildResult, error) {
	out := &BuildResult{Build: b, Module: mod}
	switch models.AfterBuild(mod.Kind, mod.CurrentBuild) {
	case models.FollowRelease:
		if artifact == nil || models.ValidPlatform(rel.os, rel.arch) != nil {
			return nil, models.Invalid("os", "a mesh-host build needs its binary as the artifact, and os and arch")
		}
		schemas, err := models.ParseReleaseSchemas(rel.schemas)
		if err != nil {
			return nil, err
		}
		version := rel.version
		if version == "" {
			version = fmt.Sprintf("build-%d", b.Number)
		}
		r := &models.Release{Version: version, OS: rel.os, Arch: rel.arch, Digest: b.Digest, Size: b.Size,
			Schemas: schemas.String(), CreatedBy: actor}
		s.signRelease(r)
		if err := tx.CreateRelease(actor, r, artifact); err != nil {
			return nil, err
		}
		ro, err := tx.RollOutRelease(actor, version, int64(DefaultRolloutDeadline.Seconds()))
		if err != nil {
			return nil, err
		}
		out.Rollout = ro
	case models.FollowPlan:
		p, err := tx.CreatePlan(actor, mod.Name, b.Number, s.ControllerBuild, "")
		if err != nil {
			return nil, err
		}
		out.Plan = p
	}
	return out, nil
}

// YankBuild is an operator marking a finished build bad.
type YankBuild struct {
	Module string
	Number int64
	// Reason is shown with the build wherever it is listed.
	Reason string
}

// MaxYankReason bounds a yank's reason.
const MaxYankReason = 500

// Validate checks what can be checked without the store.
func (r *YankBuild) Validate() error {
	if err := models.ValidName("module", r.Module); err != nil {
		return err
	}
	if r.Number <= 0 {
		return models.Invalid("number", "a build number")
	}
	if strings.TrimSpace(r.Reason) == "" {
		return models.Invalid("reason", "required: why the build is bad")
	}
	if len(r.Reason) > MaxYankReason {
		return models.Invalid("reason", fmt.Sprintf("at most %d bytes", MaxYankReason))
	}
	return nil
}

// YankBuild marks a finished build yanked: machines that run it keep it;
// it is never planned, pinned or made current again (the current build is
// not yanked: another is made current first), and its unfinished plans are
// cancelled. Audited; yanking twice changes nothing.
func (s *Service) YankBuild(ctx context.Context, actor string, r YankBuild) (*models.Build, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return s.Store.YankBuild(ctx, actor, r.Module, r.Number, strings.TrimSpace(r.Reason))
}
