package store

import (
	"context"
	"fmt"

	"gorm.io/gorm/clause"

	"mesh/models"
)

// putBlob stores content under its digest; storing the same bytes twice is a no-op.
func putBlob(tx *Tx, digest string, data []byte) error {
	return tx.Clauses(clause.OnConflict{DoNothing: true}).
		Create(&models.Blob{Digest: digest, Size: int64(len(data)), Data: data, CreatedAt: tx.s.Now()}).Error
}

// Blob reads a blob by digest.
func (s *Store) Blob(ctx context.Context, digest string) (*models.Blob, error) {
	var b models.Blob
	if err := s.db.WithContext(ctx).Where("digest = ?", digest).First(&b).Error; err != nil {
		return nil, fmt.Errorf("blob %s: %w", digest, mapErr(err))
	}
	return &b, nil
}

// BlobSent reports whether the machine was ever sent a declaration naming the
// digest: a host may read only the blobs it was sent.
func (s *Store) BlobSent(ctx context.Context, machineID int64, digest string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.Declaration{}).
		Where("machine_id = ? AND artifacts LIKE ?", machineID, "%"+digest+"%").Count(&n).Error
	return n > 0, mapErr(err)
}
