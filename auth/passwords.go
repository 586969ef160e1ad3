package auth

import (
	"golang.org/x/crypto/bcrypt"

	"mesh/models"
)

// HashPassword hashes a password for the store, refusing short ones.
func HashPassword(pw string) (string, error) {
	if len(pw) < 12 {
		return "", models.Invalid("password", "at least 12 characters")
	}
	if len(pw) > 72 {
		return "", models.Invalid("password", "at most 72 bytes")
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
	return string(h), err
}

// CheckPassword reports whether pw is the password hashed as hash.
func CheckPassword(hash, pw string) bool {
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) == nil
}
