package store

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"gorm.io/gorm/clause"

	"mesh/keyring"
)

// TLS key purposes.
const (
	// TLSCA is the mesh CA: a certificate and its PKCS#8 private key.
	TLSCA = "tls-ca"
	// TLSTicket is a session ticket key: 32 bytes, no certificate.
	TLSTicket = "tls-ticket"
)

// TLSKey is a TLS secret every replica shares (table tls_keys): the mesh
// CA, or a session ticket key. PrivateKey is stored sealed when the store
// has a keyring, and returned opened.
type TLSKey struct {
	ID          string `gorm:"primaryKey"`
	Purpose     string
	Certificate []byte
	PrivateKey  []byte
	CreatedAt   time.Time
}

// TableName is tls_keys.
func (TLSKey) TableName() string { return "tls_keys" }

// EnsureTLSKey returns the TLS key with the id, storing the one given when
// there is none yet. Two replicas starting at once both try; the insert
// that loses reads the winner's, so every replica serves under the same CA
// and resumes the same tickets.
func (s *Store) EnsureTLSKey(ctx context.Context, id, purpose string, certificate, private []byte) (*TLSKey, error) {
	if certificate == nil {
		certificate = []byte{}
	}
	stored := private
	if s.keyring != nil {
		stored = s.keyring.Seal(purpose, id, private)
	}
	k := TLSKey{ID: id, Purpose: purpose, Certificate: certificate, PrivateKey: stored, CreatedAt: s.Now()}
	db := s.db.WithContext(ctx)
	if err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&k).Error; err != nil {
		return nil, mapErr(err)
	}
	var got TLSKey
	if err := db.Where("id = ?", id).First(&got).Error; err != nil {
		return nil, mapErr(err)
	}
	if got.Purpose != purpose {
		return nil, fmt.Errorf("TLS key %s is for %s, not %s", id, got.Purpose, purpose)
	}
	if err := s.openTLSKey(&got); err != nil {
		return nil, err
	}
	return &got, nil
}

// PruneTLSKeys deletes the keys of a purpose made before a time (ticket
// keys past their use).
func (s *Store) PruneTLSKeys(ctx context.Context, purpose string, before time.Time) error {
	return mapErr(s.db.WithContext(ctx).Where("purpose = ? AND created_at < ?", purpose, before).Delete(&TLSKey{}).Error)
}

// openTLSKey replaces a key's private half, as stored, by its plaintext,
// by the same rules as the signing keys (openKey).
func (s *Store) openTLSKey(k *TLSKey) error {
	sealed := keyring.IsSealed(k.PrivateKey)
	switch {
	case sealed && s.keyring == nil:
		return fmt.Errorf("TLS key %s: %w", k.ID, keyring.ErrNoKey)
	case !sealed && s.keyring != nil:
		return fmt.Errorf("TLS key %s: %w", k.ID, ErrPlaintextKey)
	case sealed:
		b, err := s.keyring.Open(k.Purpose, k.ID, k.PrivateKey)
		if err != nil {
			return fmt.Errorf("TLS key %s: %w", k.ID, err)
		}
		k.PrivateKey = b
	}
	return nil
}

// sealTLSKeys seals, inside SealKeys' transaction, the TLS keys stored in
// plaintext, and checks that the sealed ones open. It returns the ids it
// sealed.
func (s *Store) sealTLSKeys(tx *Tx) ([]string, error) {
	q := tx.Order("id")
	if s.dialect == Postgres {
		q = q.Clauses(clause.Locking{Strength: "UPDATE"})
	}
	var ks []TLSKey
	if err := q.Find(&ks).Error; err != nil {
		return nil, err
	}
	var sealed []string
	for _, k := range ks {
		if keyring.IsSealed(k.PrivateKey) {
			if _, err := s.keyring.Open(k.Purpose, k.ID, k.PrivateKey); err != nil {
				return nil, fmt.Errorf("TLS key %s: %w", k.ID, err)
			}
			continue
		}
		if !plaintextTLSKey(k) {
			return nil, fmt.Errorf("TLS key %s is neither sealed nor a %s key (damaged?): nothing was sealed or changed; restore the store from a backup", k.ID, k.Purpose)
		}
		if err := tx.Model(&TLSKey{}).Where("id = ?", k.ID).
			Update("private_key", s.keyring.Seal(k.Purpose, k.ID, k.PrivateKey)).Error; err != nil {
			return nil, err
		}
		sealed = append(sealed, k.ID)
	}
	return sealed, nil
}

// plaintextTLSKey says whether a TLS key row not sealed holds what its
// purpose stores: the CA's PKCS #8 key, a session ticket key's 32 bytes (a
// sealed row damaged in its first bytes is neither, and must not be sealed
// again). A purpose this build does not know is taken as it is.
func plaintextTLSKey(k TLSKey) bool {
	switch k.Purpose {
	case TLSCA:
		_, err := x509.ParsePKCS8PrivateKey(k.PrivateKey)
		return err == nil
	case TLSTicket:
		return len(k.PrivateKey) == 32
	}
	return true
}
