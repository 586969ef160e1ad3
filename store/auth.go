package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"mesh/keyring"
	"mesh/models"
)

// Key purposes.
const (
	KeyDeclaration = models.KeyDeclaration
	KeyToken       = models.KeyToken
)

// EnsureKey returns the key of a purpose, creating it on first start. Two
// replicas starting at once both try; the insert that loses reads the winner's,
// so every replica signs alike. With a keyring the private half is stored
// sealed and returned opened.
func (s *Store) EnsureKey(ctx context.Context, id, purpose string) (*models.Key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	stored := priv.Seed()
	if s.keyring != nil {
		stored = s.keyring.Seal(purpose, id, stored)
	}
	k := models.Key{ID: id, Purpose: purpose, PrivateKey: stored, PublicKey: pub, CreatedAt: s.Now()}
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
	if err := s.openKey(&got); err != nil {
		return nil, err
	}
	return &got, nil
}

// Keys lists the keys of a purpose, their private halves opened.
func (s *Store) Keys(ctx context.Context, purpose string) ([]models.Key, error) {
	var ks []models.Key
	if err := s.db.WithContext(ctx).Where("purpose = ?", purpose).Order("id").Find(&ks).Error; err != nil {
		return nil, mapErr(err)
	}
	for i := range ks {
		if err := s.openKey(&ks[i]); err != nil {
			return nil, err
		}
	}
	return ks, nil
}

// SealsKeys says whether the store has a keyring: its signing keys are
// encrypted at rest.
func (s *Store) SealsKeys() bool { return s.keyring != nil }

// ErrPlaintextKey is a key stored in plaintext read by a store that has a
// keyring: SealKeys seals them when the controller starts, so one found
// later was written by a replica without the key.
var ErrPlaintextKey = errors.New("stored in plaintext, though the store's keys are encrypted at rest")

// openKey replaces a key's private half, as stored, by its seed. Without a
// keyring only plaintext keys are read (a sealed one is keyring.ErrNoKey);
// with one, only sealed keys. The seed must give the stored public key, so a
// key whose halves do not belong together is never used to sign.
func (s *Store) openKey(k *models.Key) error {
	sealed := keyring.IsSealed(k.PrivateKey)
	switch {
	case sealed && s.keyring == nil:
		return fmt.Errorf("key %s: %w", k.ID, keyring.ErrNoKey)
	case !sealed && s.keyring != nil:
		return fmt.Errorf("key %s: %w", k.ID, ErrPlaintextKey)
	case sealed:
		seed, err := s.keyring.Open(k.Purpose, k.ID, k.PrivateKey)
		if err != nil {
			return fmt.Errorf("key %s: %w", k.ID, err)
		}
		k.PrivateKey = seed
	}
	if len(k.PrivateKey) != ed25519.SeedSize ||
		!ed25519.NewKeyFromSeed(k.PrivateKey).Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(k.PublicKey)) {
		return fmt.Errorf("key %s: its private half does not give its public key", k.ID)
	}
	return nil
}

// SealKeys seals, in one transaction, every key stored in plaintext with the
// store's keyring (the signing keys and the TLS keys), and checks that every sealed one opens with it, so a
// wrong key is found at start rather than at the first signature. It
// returns how many keys it sealed.
func (s *Store) SealKeys(ctx context.Context) (int, error) {
	if s.keyring == nil {
		return 0, errors.New("sealing keys: the store has no keyring")
	}
	return Write(ctx, s, func(tx *Tx) (int, error) {
		q := tx.Order("id")
		if s.dialect == Postgres {
			// A replica sealing at the same time waits, then finds them sealed.
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		var ks []models.Key
		if err := q.Find(&ks).Error; err != nil {
			return 0, err
		}
		var sealed []string
		for _, k := range ks {
			if keyring.IsSealed(k.PrivateKey) {
				if _, err := s.keyring.Open(k.Purpose, k.ID, k.PrivateKey); err != nil {
					return 0, fmt.Errorf("key %s: %w", k.ID, err)
				}
				continue
			}
			// Only a key is sealed: a sealed row whose first bytes were
			// damaged read as plaintext, and was sealed again (the damage
			// kept under a second layer, "sealed at rest" on the record)
			// before the start refused it.
			if len(k.PrivateKey) != ed25519.SeedSize ||
				!ed25519.NewKeyFromSeed(k.PrivateKey).Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(k.PublicKey)) {
				return 0, fmt.Errorf("key %s is neither sealed nor a key that gives its public key (damaged?): nothing was sealed or changed; "+
					"restore the store from a backup", k.ID)
			}
			if err := tx.Model(&models.Key{}).Where("id = ?", k.ID).
				Update("private_key", s.keyring.Seal(k.Purpose, k.ID, k.PrivateKey)).Error; err != nil {
				return 0, err
			}
			sealed = append(sealed, k.ID)
		}
		tlsSealed, err := s.sealTLSKeys(tx)
		if err != nil {
			return 0, err
		}
		sealed = append(sealed, tlsSealed...)
		if len(sealed) == 0 {
			return 0, nil
		}
		return len(sealed), audit(tx, "controller", "seal-keys", "keys", "sealed at rest: "+strings.Join(sealed, ", "))
	})
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

// UpdateUser gives an existing user a role and a new password (the
// shell's user add), audited, and revokes every token the user held,
// sessions and API tokens, through the one RevokedUser revocation a
// disable makes: a password is replaced most often because the old one
// may be known, and a token outlives the password it was logged in with.
func (s *Store) UpdateUser(ctx context.Context, actor, name, role, hash string, sessionTTL time.Duration) error {
	return s.write(ctx, func(tx *Tx) error {
		res := tx.Model(&models.User{}).Where("name = ?", name).Updates(map[string]any{"role": role, "password_hash": hash})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("user %s: %w", name, models.ErrNotFound)
		}
		if err := revokeUser(tx, actor, name, s.Now(), sessionTTL, "new password, role "+role); err != nil {
			return err
		}
		return audit(tx, actor, "update-user", "user/"+name, "role "+role+", new password, every token revoked")
	})
}

// SetPassword sets a person's own new password, if their password is
// still the one checked (was), and revokes every token of theirs. Only
// the hash is written: a person's change of their password read their
// role before its checks and wrote it back with the hash, so an admin's
// lowering of that role meanwhile was undone.
func (s *Store) SetPassword(ctx context.Context, actor, name, was, hash string, sessionTTL time.Duration) error {
	return s.write(ctx, func(tx *Tx) error {
		res := tx.Model(&models.User{}).Where("name = ? AND password_hash = ?", name, was).Update("password_hash", hash)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: the password of %s changed meanwhile (or the user is gone); log in again", models.ErrConflict, name)
		}
		if err := revokeUser(tx, actor, name, s.Now(), sessionTTL, "new password"); err != nil {
			return err
		}
		return audit(tx, actor, "update-user", "user/"+name, "new password, every token revoked")
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

// Users lists users newest first.
func (s *Store) Users(ctx context.Context, limit int, cursor int64) ([]models.User, error) {
	var us []models.User
	q := s.db.WithContext(ctx).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	return us, mapErr(q.Find(&us).Error)
}

// CountUsers is how many users exist.
func (s *Store) CountUsers(ctx context.Context) (int64, error) {
	var n int64
	return n, mapErr(s.db.WithContext(ctx).Model(&models.User{}).Count(&n).Error)
}

// CreateJoinToken stores the hash of a new single-use join token.
func (s *Store) CreateJoinToken(ctx context.Context, actor, hash string, expires time.Time) error {
	_, err := s.CreateLabelledJoinToken(ctx, actor, hash, expires, "")
	return err
}

// CreateLabelledJoinToken is CreateJoinToken with the labels (a JSON
// object, or empty) the machine enrolling with it is given; it returns
// the token's id (what it is listed and revoked by).
func (s *Store) CreateLabelledJoinToken(ctx context.Context, actor, hash string, expires time.Time, labels string) (int64, error) {
	var id int64
	err := s.write(ctx, func(tx *Tx) error {
		if labels == "" {
			labels = "{}"
		}
		jt := models.JoinToken{TokenHash: hash, ExpiresAt: expires, CreatedBy: actor, CreatedAt: s.Now(), Labels: labels}
		if err := tx.Create(&jt).Error; err != nil {
			return err
		}
		id = jt.ID
		return audit(tx, actor, "create-join-token", fmt.Sprintf("join-token/%d", jt.ID), "expires "+expires.Format(time.RFC3339))
	})
	return id, err
}

// JoinTokens lists join tokens newest first, their hashes with them (the
// caller shows ids, never hashes).
func (s *Store) JoinTokens(ctx context.Context, limit int, cursor int64) ([]models.JoinToken, error) {
	var ts []models.JoinToken
	q := s.db.WithContext(ctx).Order("id DESC").Limit(limit)
	if cursor > 0 {
		q = q.Where("id < ?", cursor)
	}
	return ts, mapErr(q.Find(&ts).Error)
}

// RevokeJoinToken makes an unused join token unspendable, audited. A used
// token is a conflict (the machine it enrolled is deleted instead); one
// already revoked is returned as it is, and audited once.
func (s *Store) RevokeJoinToken(ctx context.Context, actor string, id int64) (*models.JoinToken, error) {
	var jt models.JoinToken
	err := s.write(ctx, func(tx *Tx) error {
		jt = models.JoinToken{}
		q := tx.DB
		if s.dialect == Postgres {
			q = q.Clauses(clause.Locking{Strength: "UPDATE"})
		}
		if err := q.Where("id = ?", id).First(&jt).Error; err != nil {
			return fmt.Errorf("join token %d: %w", id, mapErr(err))
		}
		switch {
		case jt.UsedAt != nil:
			return fmt.Errorf("%w: join token %d was used by machine %s; delete the machine instead", models.ErrConflict, id, jt.UsedBy)
		case jt.RevokedAt != nil:
			return nil
		}
		now := s.Now()
		if err := tx.Model(&jt).Updates(map[string]any{"revoked_at": now, "revoked_by": actor}).Error; err != nil {
			return err
		}
		jt.RevokedAt, jt.RevokedBy = &now, actor
		return audit(tx, actor, "revoke-join-token", fmt.Sprintf("join-token/%d", id), "")
	})
	if err != nil {
		return nil, err
	}
	return &jt, nil
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
