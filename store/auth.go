package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/models"
)

// Key purposes.
const (
	KeyDeclaration = models.KeyDeclaration
	KeyToken       = models.KeyToken
)

// EnsureKey returns the key of a purpose, creating it on first start. Two
// replicas starting at once both try; the insert that loses reads the winner's,
// so every replica signs alike.
func (s *Store) EnsureKey(ctx context.Context, id, purpose string) (*models.Key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	k := models.Key{ID: id, Purpose: purpose, PrivateKey: priv.Seed(), PublicKey: pub, CreatedAt: s.Now()}
	db := s.db.WithContext(ctx)
	if err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&k).Error; err != nil {
		return nil, mapErr(err)
	}
	var got models.Key
	if err := db.Where("id = ?", id).First(&got).Error; err != nil {
		return nil, mapErr(err)
	}
	if got.Purpose != purpose {
		return nil, fmt.Errorf("key %s is for %s, not %s", id, got.Purpose, purpose)
	}
	return &got, nil
}

// Keys lists the keys of a purpose.
func (s *Store) Keys(ctx context.Context, purpose string) ([]models.Key, error) {
	var ks []models.Key
	return ks, mapErr(s.db.WithContext(ctx).Where("purpose = ?", purpose).Order("id").Find(&ks).Error)
}

// CreateUser adds a user; the name is unique.
func (s *Store) CreateUser(ctx context.Context, actor string, u *models.User) error {
	return s.write(ctx, func(tx *Tx) error {
		u.CreatedAt = s.Now()
		if err := tx.Create(u).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				return fmt.Errorf("%w: user %s already exists", models.ErrConflict, u.Name)
			}
			return err
		}
		return audit(tx, actor, "create-user", "user/"+u.Name, "role "+u.Role)
	})
}

// SetPassword replaces a user's password hash and role.
func (s *Store) UpdateUser(ctx context.Context, actor, name, role, hash string) error {
	return s.write(ctx, func(tx *Tx) error {
		res := tx.Model(&models.User{}).Where("name = ?", name).Updates(map[string]any{"role": role, "password_hash": hash})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("user %s: %w", name, models.ErrNotFound)
		}
		return audit(tx, actor, "update-user", "user/"+name, "role "+role)
	})
}

// User reads a user by name.
func (s *Store) User(ctx context.Context, name string) (*models.User, error) {
	var u models.User
	if err := s.db.WithContext(ctx).Where("name = ?", name).First(&u).Error; err != nil {
		return nil, fmt.Errorf("user %s: %w", name, mapErr(err))
	}
	return &u, nil
}

// CountUsers is how many users exist.
func (s *Store) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	return n, mapErr(s.db.WithContext(ctx).Model(&models.User{}).Count(&n).Error)
}

// CreateJoinToken stores the hash of a new single-use join token.
func (s *Store) CreateJoinToken(ctx context.Context, actor, hash string, expires time.Time) error {
	return s.write(ctx, func(tx *Tx) error {
		jt := models.JoinToken{TokenHash: hash, ExpiresAt: expires, CreatedBy: actor, CreatedAt: s.Now()}
		if err := tx.Create(&jt).Error; err != nil {
			return err
		}
		return audit(tx, actor, "create-join-token", fmt.Sprintf("join-token/%d", jt.ID), "expires "+expires.Format(time.RFC3339))
	})
}

// KeySigner signs with one of the store's ed25519 keys.
type KeySigner struct {
	ID   string
	Priv ed25519.PrivateKey
}

// NewKeySigner makes a signer of a stored key.
func NewKeySigner(k *models.Key) *KeySigner {
	return &KeySigner{ID: k.ID, Priv: ed25519.NewKeyFromSeed(k.PrivateKey)}
}

// KeyID names the key.
func (k *KeySigner) KeyID() string { return k.ID }

// Sign signs payload.
func (k *KeySigner) Sign(payload []byte) []byte { return ed25519.Sign(k.Priv, payload) }
