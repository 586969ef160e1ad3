package auth

import (
	"sync"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/text/unicode/norm"

	"mesh/models"
)

// Password length rules, counted in characters (code points after NFC
// normalisation: "é" typed either way is one), and bcrypt's 72-byte limit.
const (
	MinPasswordChars = 12
	MaxPasswordBytes = 72
)

// PasswordCost is bcrypt's cost for the hashes HashPassword makes and the
// unknown user's (CheckNoUser). Test controllers lower it (ctltest): a
// test's first user and login at the default cost took ~0.5 s of CPU
// under the race detector, most of a test controller's start.
var PasswordCost = bcrypt.DefaultCost

// HashPassword hashes a password for the store, refusing short ones.
func HashPassword(pw string) (string, error) {
	pw = norm.NFC.String(pw)
	if utf8.RuneCountInString(pw) < MinPasswordChars {
		return "", models.Invalid("password", "at least 12 characters")
	}
	if len(pw) > MaxPasswordBytes {
		return "", models.Invalid("password", "at most 72 bytes")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), PasswordCost)
	return string(h), err
}

// CheckPassword reports whether pw is the password hashed as hash. A
// password typed in another Unicode normal form matches too.
func CheckPassword(hash, pw string) bool { return check([]byte(hash), pw) }

// check compares pw with hash as typed in NFC (how HashPassword stores
// it) and, when that differs, as typed (a hash made before passwords were
// normalised). The second comparison only when the forms differ: a wrong
// password cost two bcrypt checks, doubling what a guesser made the
// server spend. Unknown users go through here too (CheckNoUser), so a
// wrong password costs a known user and an unknown one the same number
// of comparisons whatever its form.
func check(hash []byte, pw string) bool {
	nfc := norm.NFC.String(pw)
	if bcrypt.CompareHashAndPassword(hash, []byte(nfc)) == nil {
		return true
	}
	return nfc != pw && bcrypt.CompareHashAndPassword(hash, []byte(pw)) == nil
}

// dummyHash is compared against when a user does not exist, so an unknown
// user takes as long to refuse as a wrong password (no user enumeration
// by timing).
var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("no user has this password"), PasswordCost)
	return h
})

// CheckNoUser spends the time a password check takes, and fails. It ran
// one comparison whatever the password's form, where a known user's
// wrong password not in NFC ran two: which names exist showed in a failed
// login's time.
func CheckNoUser(pw string) bool {
	_ = check(dummyHash(), pw)
	return false
}
