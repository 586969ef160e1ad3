// Package keyring keeps the controller's secrets encrypted at rest: it seals
// a secret (a signing key's private half, later a CA's) with
// XChaCha20-Poly1305 under one 32-byte key the operator gives by file or
// environment, and opens it again. A sealed secret is bound to its purpose
// and id, so a sealed value copied into another row does not open there.
package keyring

import (
	"bytes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/crypto/chacha20poly1305"
)

// KeySize is the size of the key that seals: 32 bytes.
const KeySize = chacha20poly1305.KeySize

// magic starts every sealed value, so a sealed value is told from a
// plaintext one (a 32-byte ed25519 seed, say) by its bytes alone, and a
// dump of the store shows what it holds.
const magic = "mesh/sealed"

// version is the sealed format this build writes: magic, version byte,
// 24-byte nonce, ciphertext with its 16-byte tag.
const version byte = 1

const headerSize = len(magic) + 1

// ErrCannotOpen is a sealed value that does not open: another key sealed
// it, its bytes were altered, or it was sealed for another purpose or id.
// AEAD cannot tell these apart, so neither does this error.
var ErrCannotOpen = errors.New("does not open with this key (sealed under another key, altered, or sealed for another purpose or id)")

// ErrNoKey is a sealed value read with no key to open it.
var ErrNoKey = errors.New("encrypted at rest, and no key was given to open it")

// Keyring seals and opens secrets under one key. It holds no other state and
// is safe for concurrent use.
type Keyring struct {
	aead cipher.AEAD
}

// New makes a keyring of a 32-byte key.
func New(key []byte) (*Keyring, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("a key is %d bytes, not %d", KeySize, len(key))
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, err
	}
	return &Keyring{aead: aead}, nil
}

// Parse makes a keyring of a key written as 32 raw bytes, 64 hex characters
// or the base64 of 32 bytes (standard or URL alphabet, padded or not). Text
// may end in a newline. Anything else is refused: a passphrase or a short
// key would seal under less than 256 bits. 32 bytes that are all text (32
// hex characters, say: 16 bytes of key) are refused too; 32 random bytes
// are all printable once in about 10^13.
func Parse(b []byte) (*Keyring, error) {
	if len(b) == KeySize && !isText(b) {
		return New(b)
	}
	text := string(bytes.TrimSpace(b))
	if len(text) == 2*KeySize {
		if key, err := hex.DecodeString(text); err == nil {
			return New(key)
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if key, err := enc.DecodeString(text); err == nil && len(key) == KeySize {
			return New(key)
		}
	}
	return nil, fmt.Errorf("not a key: %d bytes; a key is %d raw bytes (head -c 32 /dev/urandom), 64 hex characters or the base64 of 32 bytes", len(b), KeySize)
}

// isText says whether b is printable ASCII and whitespace only.
func isText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// Load reads a key file (see Parse). A file that group or others may read or
// write is refused: the key is only as private as its file.
func Load(path string) (*Keyring, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("key file %s is not a regular file", path)
	}
	// Windows has no such mode bits; its files are guarded by ACLs.
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("key file %s is open to group or others (mode %04o): chmod 600 %s", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	k, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return k, nil
}

// Seal encrypts secret for the row of purpose and id. Each call draws a
// fresh random nonce, so sealing one secret twice gives different bytes.
func (k *Keyring) Seal(purpose, id string, secret []byte) []byte {
	ns := k.aead.NonceSize()
	out := make([]byte, headerSize+ns, headerSize+ns+len(secret)+k.aead.Overhead())
	copy(out, magic)
	out[len(magic)] = version
	nonce := out[headerSize:]
	rand.Read(nonce) // never fails: crypto/rand crashes the program rather than return an error
	return k.aead.Seal(out, nonce, secret, associatedData(out[:headerSize], purpose, id))
}

// Open decrypts what Seal sealed for the same purpose and id.
func (k *Keyring) Open(purpose, id string, sealed []byte) ([]byte, error) {
	if !IsSealed(sealed) {
		return nil, errors.New("not a sealed value")
	}
	if v := sealed[len(magic)]; v != version {
		return nil, fmt.Errorf("sealed in format %d, which this build does not know", v)
	}
	ns := k.aead.NonceSize()
	nonce, ct := sealed[headerSize:headerSize+ns], sealed[headerSize+ns:]
	secret, err := k.aead.Open(nil, nonce, ct, associatedData(sealed[:headerSize], purpose, id))
	if err != nil {
		return nil, ErrCannotOpen
	}
	return secret, nil
}

// IsSealed says whether b is in the sealed form (of any version).
func IsSealed(b []byte) bool {
	return len(b) >= headerSize+chacha20poly1305.NonceSizeX+chacha20poly1305.Overhead && string(b[:len(magic)]) == magic
}

// associatedData binds a sealed value to its header, purpose and id, each
// length-prefixed so no two (purpose, id) pairs give the same bytes.
func associatedData(header []byte, purpose, id string) []byte {
	ad := append([]byte(nil), header...)
	ad = binary.BigEndian.AppendUint32(ad, uint32(len(purpose)))
	ad = append(ad, purpose...)
	ad = binary.BigEndian.AppendUint32(ad, uint32(len(id)))
	return append(ad, id...)
}
