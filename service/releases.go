package service

import (
	"context"

	"mesh/models"
	"mesh/store"
)

// CreateRelease is a mesh-host binary an admin publishes.
type CreateRelease struct {
	Version, OS, Arch string
	// Schemas is the declaration schemas the binary decodes ("1,2"),
	// required (models.ParseReleaseSchemas).
	Schemas string
	// Binary is the uploaded binary, stored first (PutArtifact).
	Binary *models.Blob
}

// Validate checks the release's words and that it has a binary.
func (r *CreateRelease) Validate() error {
	if err := models.ValidVersion("version", r.Version, true); err != nil {
		return err
	}
	if err := models.ValidPlatform(r.OS, r.Arch); err != nil {
		return err
	}
	if _, err := models.ParseReleaseSchemas(r.Schemas); err != nil {
		return err
	}
	if r.Binary == nil || r.Binary.Size == 0 {
		return models.Invalid("binary", "required: the mesh-host binary")
	}
	return nil
}

// CreateRelease stores a host release content-addressed and signs
// {version, os, arch, digest}.
func (s *Service) CreateRelease(ctx context.Context, actor string, req *CreateRelease) (*models.Release, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return store.Write(ctx, s.Store, func(tx *store.Tx) (*models.Release, error) {
		schemas, _ := models.ParseReleaseSchemas(req.Schemas)
		r := &models.Release{Version: req.Version, OS: req.OS, Arch: req.Arch, Digest: req.Binary.Digest,
			Size: req.Binary.Size, Schemas: schemas.String(), CreatedBy: actor}
		s.signRelease(r)
		return r, tx.CreateRelease(actor, r, req.Binary)
	})
}
