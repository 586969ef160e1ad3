package keyring_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"mesh/keyring"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, keyring.KeySize)
	rand.Read(k)
	return k
}

func mustNew(t *testing.T, key []byte) *keyring.Keyring {
	t.Helper()
	k, err := keyring.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	ring := mustNew(t, newKey(t))
	secret := []byte("an ed25519 seed, 32 bytes long..")
	sealed := ring.Seal("declaration", "k1", secret)

	t.Run("OK", func(t *testing.T) {
		if !keyring.IsSealed(sealed) {
			t.Fatal("IsSealed: false for a sealed value")
		}
		if bytes.Contains(sealed, secret) {
			t.Fatal("the sealed value holds the secret")
		}
		got, err := ring.Open("declaration", "k1", sealed)
		if err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("Open = %q, %v", got, err)
		}
	})
	t.Run("FreshNonceEachSeal", func(t *testing.T) {
		if bytes.Equal(sealed, ring.Seal("declaration", "k1", secret)) {
			t.Fatal("sealing twice gave the same bytes")
		}
	})
	t.Run("PlaintextIsNotSealed", func(t *testing.T) {
		if keyring.IsSealed(secret) || keyring.IsSealed(nil) {
			t.Fatal("IsSealed: true for plaintext")
		}
	})

	refused := map[string]func() ([]byte, error){
		"ErrWrongKey": func() ([]byte, error) {
			return mustNew(t, newKey(t)).Open("declaration", "k1", sealed)
		},
		"ErrTamperedCiphertext": func() ([]byte, error) {
			b := bytes.Clone(sealed)
			b[len(b)-20] ^= 1
			return ring.Open("declaration", "k1", b)
		},
		"ErrTamperedTag": func() ([]byte, error) {
			b := bytes.Clone(sealed)
			b[len(b)-1] ^= 1
			return ring.Open("declaration", "k1", b)
		},
		"ErrTamperedNonce": func() ([]byte, error) {
			b := bytes.Clone(sealed)
			b[len("mesh/sealed")+1] ^= 1
			return ring.Open("declaration", "k1", b)
		},
		"ErrOtherID": func() ([]byte, error) { return ring.Open("declaration", "k2", sealed) },
		"ErrOtherPurpose": func() ([]byte, error) {
			return ring.Open("token", "k1", sealed)
		},
		// Without length prefixes these two would give the same associated data.
		"ErrShiftedBoundary": func() ([]byte, error) {
			return ring.Open("declarationk", "1", sealed)
		},
	}
	for name, open := range refused {
		t.Run(name, func(t *testing.T) {
			got, err := open()
			if !errors.Is(err, keyring.ErrCannotOpen) {
				t.Fatalf("Open = %q, %v; want ErrCannotOpen", got, err)
			}
		})
	}
	t.Run("ErrUnknownVersion", func(t *testing.T) {
		b := bytes.Clone(sealed)
		b[len("mesh/sealed")] = 9
		if _, err := ring.Open("declaration", "k1", b); err == nil || !strings.Contains(err.Error(), "format 9") {
			t.Fatalf("Open = %v; want the unknown format named", err)
		}
	})
	t.Run("ErrNotSealed", func(t *testing.T) {
		if _, err := ring.Open("declaration", "k1", secret); err == nil {
			t.Fatal("Open of plaintext succeeded")
		}
	})
}

func TestParse(t *testing.T) {
	key := newKey(t)
	ring := mustNew(t, key)
	sealed := ring.Seal("p", "i", []byte("s"))
	for name, text := range map[string][]byte{
		"Raw":          key,
		"Hex":          []byte(hex.EncodeToString(key)),
		"HexNewline":   []byte(hex.EncodeToString(key) + "\n"),
		"HexUpper":     []byte(strings.ToUpper(hex.EncodeToString(key))),
		"Base64":       []byte(base64.StdEncoding.EncodeToString(key) + "\n"),
		"Base64Raw":    []byte(base64.RawStdEncoding.EncodeToString(key)),
		"Base64URL":    []byte(base64.URLEncoding.EncodeToString(key)),
		"Base64RawURL": []byte(base64.RawURLEncoding.EncodeToString(key)),
	} {
		t.Run(name, func(t *testing.T) {
			k, err := keyring.Parse(text)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := k.Open("p", "i", sealed); err != nil {
				t.Fatalf("the parsed key is not the key: %v", err)
			}
		})
	}
	for name, text := range map[string][]byte{
		"ErrEmpty":      nil,
		"ErrShortRaw":   key[:31],
		"ErrLongRaw":    append(bytes.Clone(key), 0),
		"ErrPassphrase": []byte("correct horse battery staple\n"),
		"ErrShortHex":   []byte(hex.EncodeToString(key[:16])),
		"ErrBadHex":     []byte(strings.Repeat("zz", 32)),
		"ErrBase64Of16": []byte(base64.StdEncoding.EncodeToString(key[:16])),
		// 32 characters are 32 bytes, but not 32 random ones.
		"Err32Characters": []byte(base64.StdEncoding.EncodeToString(key[:24])),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := keyring.Parse(text)
			if err == nil || !strings.Contains(err.Error(), "not a key") {
				t.Fatalf("Parse = %v; want refused as not a key", err)
			}
			if len(text) > 8 && strings.Contains(err.Error(), string(text[:8])) {
				t.Fatalf("the error repeats the key file's contents: %v", err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	write := func(t *testing.T, b []byte, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	t.Run("OK", func(t *testing.T) {
		if _, err := keyring.Load(write(t, newKey(t), 0o600)); err != nil {
			t.Fatal(err)
		}
		if _, err := keyring.Load(write(t, []byte(hex.EncodeToString(newKey(t))+"\n"), 0o400)); err != nil {
			t.Fatal(err)
		}
	})
	if runtime.GOOS != "windows" {
		for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o602} {
			t.Run("ErrOpenTo"+mode.String(), func(t *testing.T) {
				p := write(t, newKey(t), mode)
				_, err := keyring.Load(p)
				if err == nil || !strings.Contains(err.Error(), "open to group or others") || !strings.Contains(err.Error(), "chmod 600 "+p) {
					t.Fatalf("Load = %v; want refused for its mode", err)
				}
			})
		}
	}
	t.Run("ErrNotAKey", func(t *testing.T) {
		p := write(t, []byte("hunter2\n"), 0o600)
		if _, err := keyring.Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a key") {
			t.Fatalf("Load = %v; want the file named and refused", err)
		}
	})
	t.Run("ErrMissing", func(t *testing.T) {
		if _, err := keyring.Load(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Load = %v; want ErrNotExist", err)
		}
	})
	t.Run("ErrDirectory", func(t *testing.T) {
		if _, err := keyring.Load(t.TempDir()); err == nil {
			t.Fatal("Load of a directory succeeded")
		}
	})
}
