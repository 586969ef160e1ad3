package store_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"

	"mesh/keyring"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// keyDialects runs f once per dialect with the config of a fresh, migrated
// store, so a test can open it again with another keyring (or none).
func keyDialects(t *testing.T, f func(t *testing.T, cfg store.Config)) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			cfg := storetest.Config(t, d)
			if _, err := openWith(t, cfg, nil).Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			f(t, cfg)
		})
	}
}

// openWith opens the store cfg names with a keyring (nil: none).
func openWith(t *testing.T, cfg store.Config, ring *keyring.Keyring) *store.Store {
	t.Helper()
	cfg.Keyring = ring
	s, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newRing(t *testing.T) *keyring.Keyring {
	t.Helper()
	key := make([]byte, keyring.KeySize)
	rand.Read(key)
	ring, err := keyring.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// rawPrivateKey is the private_key column of a key's row, as stored.
func rawPrivateKey(t *testing.T, s *store.Store, id string) []byte {
	t.Helper()
	var b []byte
	if err := s.DB().Raw("SELECT private_key FROM keys WHERE id = ?", id).Row().Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

// checkKey fails unless k's private half is a seed that gives its public key.
func checkKey(t *testing.T, k models.Key) {
	t.Helper()
	if len(k.PrivateKey) != ed25519.SeedSize {
		t.Fatalf("key %s: private half of %d bytes, not an opened seed", k.ID, len(k.PrivateKey))
	}
	if !ed25519.NewKeyFromSeed(k.PrivateKey).Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(k.PublicKey)) {
		t.Fatalf("key %s: the seed does not give the public key", k.ID)
	}
}

func TestKeys_SealedAtRest(t *testing.T) {
	ctx := context.Background()
	keyDialects(t, func(t *testing.T, cfg store.Config) {
		ring := newRing(t)
		s := openWith(t, cfg, ring)
		decl, err := s.EnsureKey(ctx, "k1", store.KeyDeclaration)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.EnsureKey(ctx, "t1", store.KeyToken)
		if err != nil {
			t.Fatal(err)
		}

		t.Run("OK", func(t *testing.T) {
			for _, k := range []*models.Key{decl, tok} {
				checkKey(t, *k)
				raw := rawPrivateKey(t, s, k.ID)
				if bytes.Contains(raw, k.PrivateKey) {
					t.Fatalf("key %s: the row holds the private key", k.ID)
				}
				if !keyring.IsSealed(raw) {
					t.Fatalf("key %s: the row is not sealed: %x", k.ID, raw[:8])
				}
			}
			again, err := openWith(t, cfg, ring).EnsureKey(ctx, "k1", store.KeyDeclaration)
			if err != nil || !bytes.Equal(again.PrivateKey, decl.PrivateKey) {
				t.Fatalf("EnsureKey on restart = %v; want the same key", err)
			}
			ks, err := s.Keys(ctx, store.KeyDeclaration)
			if err != nil || len(ks) != 1 || !bytes.Equal(ks[0].PrivateKey, decl.PrivateKey) {
				t.Fatalf("Keys = %d keys, %v; want k1 opened", len(ks), err)
			}
		})
		t.Run("ErrNoKey", func(t *testing.T) {
			plain := openWith(t, cfg, nil)
			if _, err := plain.EnsureKey(ctx, "k1", store.KeyDeclaration); !errors.Is(err, keyring.ErrNoKey) {
				t.Fatalf("EnsureKey = %v; want ErrNoKey", err)
			}
			if _, err := plain.Keys(ctx, store.KeyToken); !errors.Is(err, keyring.ErrNoKey) {
				t.Fatalf("Keys = %v; want ErrNoKey", err)
			}
		})
		t.Run("ErrWrongKey", func(t *testing.T) {
			other := openWith(t, cfg, newRing(t))
			if _, err := other.EnsureKey(ctx, "t1", store.KeyToken); !errors.Is(err, keyring.ErrCannotOpen) {
				t.Fatalf("EnsureKey = %v; want ErrCannotOpen", err)
			}
			if _, err := other.SealKeys(ctx); !errors.Is(err, keyring.ErrCannotOpen) {
				t.Fatalf("SealKeys = %v; want ErrCannotOpen", err)
			}
		})
		t.Run("ErrSwappedRows", func(t *testing.T) {
			// Both sealed under the same key: only the associated data tells them apart.
			if err := s.DB().Exec("UPDATE keys SET private_key = ? WHERE id = ?", rawPrivateKey(t, s, "k1"), "t1").Error; err != nil {
				t.Fatal(err)
			}
			if _, err := s.EnsureKey(ctx, "t1", store.KeyToken); !errors.Is(err, keyring.ErrCannotOpen) {
				t.Fatalf("EnsureKey of a row holding another row's sealed key = %v; want ErrCannotOpen", err)
			}
		})
	})
}

func TestSealKeys_PlaintextStore(t *testing.T) {
	ctx := context.Background()
	keyDialects(t, func(t *testing.T, cfg store.Config) {
		plain := openWith(t, cfg, nil)
		before := map[string]*models.Key{}
		for id, purpose := range map[string]string{"k1": store.KeyDeclaration, "t1": store.KeyToken} {
			k, err := plain.EnsureKey(ctx, id, purpose)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rawPrivateKey(t, plain, id), k.PrivateKey) {
				t.Fatalf("without a keyring the key %s is not stored as it is", id)
			}
			before[id] = k
		}
		ring := newRing(t)
		s := openWith(t, cfg, ring)
		if _, err := s.EnsureKey(ctx, "k1", store.KeyDeclaration); !errors.Is(err, store.ErrPlaintextKey) {
			t.Fatalf("EnsureKey before SealKeys = %v; want ErrPlaintextKey", err)
		}

		n, err := s.SealKeys(ctx)
		if err != nil || n != 2 {
			t.Fatalf("SealKeys = %d, %v; want 2 sealed", n, err)
		}
		for id, k := range before {
			if raw := rawPrivateKey(t, s, id); bytes.Contains(raw, k.PrivateKey) || !keyring.IsSealed(raw) {
				t.Fatalf("key %s: not sealed after SealKeys", id)
			}
			got, err := s.EnsureKey(ctx, id, k.Purpose)
			if err != nil || !bytes.Equal(got.PrivateKey, k.PrivateKey) {
				t.Fatalf("key %s after sealing: %v; want the same key", id, err)
			}
		}
		if n, err := s.SealKeys(ctx); err != nil || n != 0 {
			t.Fatalf("SealKeys again = %d, %v; want nothing to seal", n, err)
		}
		var audited int64
		if err := s.DB().Model(&models.AuditEvent{}).Where("action = ?", "seal-keys").Count(&audited).Error; err != nil || audited != 1 {
			t.Fatalf("seal-keys audit events = %d, %v; want 1", audited, err)
		}
	})
}
