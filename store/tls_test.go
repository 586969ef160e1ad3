package store_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"mesh/keyring"
	"mesh/store"
)

// TestTLSKeys_SharedAndSealed: the first EnsureTLSKey stores its key and
// every later one (another replica, a restart) gets that key back; with a
// keyring the private half is sealed in the row, SealKeys seals one stored
// in plaintext, and a store without the key refuses to open it.
func TestTLSKeys_SharedAndSealed(t *testing.T) {
	ctx := context.Background()
	// The CA's private halves as they are stored: PKCS #8 (SealKeys seals
	// only a row that holds one).
	pkcs8 := func() []byte {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	private1, private2 := pkcs8(), pkcs8()
	keyDialects(t, func(t *testing.T, cfg store.Config) {
		plain := openWith(t, cfg, nil)
		first, err := plain.EnsureTLSKey(ctx, "ca1", store.TLSCA, []byte("cert-1"), private1)
		if err != nil {
			t.Fatal(err)
		}
		again, err := plain.EnsureTLSKey(ctx, "ca1", store.TLSCA, []byte("cert-2"), private2)
		if err != nil {
			t.Fatal(err)
		}
		if string(again.Certificate) != "cert-1" || !bytes.Equal(again.PrivateKey, private1) || !bytes.Equal(first.PrivateKey, private1) {
			t.Fatalf("the second start got %q/%q, want the first's", again.Certificate, again.PrivateKey)
		}
		if _, err := plain.EnsureTLSKey(ctx, "ca1", store.TLSTicket, nil, []byte("x")); err == nil {
			t.Fatal("a key of another purpose under the same id was accepted")
		}

		ring := newRing(t)
		sealing := openWith(t, cfg, ring)
		if n, err := sealing.SealKeys(ctx); err != nil || n != 1 {
			t.Fatalf("sealed %d, %v; want the one TLS key", n, err)
		}
		var raw []byte
		if err := sealing.DB().Raw("SELECT private_key FROM tls_keys WHERE id = ?", "ca1").Row().Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if !keyring.IsSealed(raw) || bytes.Contains(raw, private1) {
			t.Fatalf("stored %q, want it sealed", raw)
		}
		got, err := sealing.EnsureTLSKey(ctx, "ca1", store.TLSCA, []byte("cert-3"), []byte("private-3"))
		if err != nil || !bytes.Equal(got.PrivateKey, private1) {
			t.Fatalf("opened %q, %v", got.PrivateKey, err)
		}
		if _, err := plain.EnsureTLSKey(ctx, "ca1", store.TLSCA, nil, []byte("p")); !errors.Is(err, keyring.ErrNoKey) {
			t.Fatalf("without the key: %v, want ErrNoKey", err)
		}
		if _, err := openWith(t, cfg, newRing(t)).SealKeys(ctx); !errors.Is(err, keyring.ErrCannotOpen) {
			t.Fatalf("another key: %v, want ErrCannotOpen", err)
		}
	})
}

func TestTLSKeys_Prune(t *testing.T) {
	ctx := context.Background()
	keyDialects(t, func(t *testing.T, cfg store.Config) {
		s := openWith(t, cfg, nil)
		now := time.Now().UTC()
		s.Now = func() time.Time { return now.Add(-72 * time.Hour) }
		if _, err := s.EnsureTLSKey(ctx, "old", store.TLSTicket, nil, []byte("a")); err != nil {
			t.Fatal(err)
		}
		s.Now = func() time.Time { return now }
		if _, err := s.EnsureTLSKey(ctx, "new", store.TLSTicket, nil, []byte("b")); err != nil {
			t.Fatal(err)
		}
		if err := s.PruneTLSKeys(ctx, store.TLSTicket, now.Add(-48*time.Hour)); err != nil {
			t.Fatal(err)
		}
		var ids []string
		if err := s.DB().Raw("SELECT id FROM tls_keys ORDER BY id").Scan(&ids).Error; err != nil {
			t.Fatal(err)
		}
		if len(ids) != 1 || ids[0] != "new" {
			t.Fatalf("left %v, want [new]", ids)
		}
	})
}
