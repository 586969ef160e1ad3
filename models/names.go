package models

import (
	"regexp"
	"strings"
)

// A name (machine, module, variable key, resource name) is short, lowercase
// and safe in a URL, a file name and a unit name alike.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// varKeyRE is the form of a machine variable key, as used in ${var.KEY}.
var varKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidName reports why s is not a valid name, or nil.
func ValidName(field, s string) error {
	if !nameRE.MatchString(s) || strings.Contains(s, "..") {
		return Invalid(field, "must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting and ending with a letter or digit")
	}
	return nil
}

// ValidVarKey reports why k is not a valid variable key, or nil.
func ValidVarKey(k string) error {
	if !varKeyRE.MatchString(k) {
		return Invalid("variables."+Clip(k, 80), "a key is a letter or '_' then up to 63 letters, digits or '_'")
	}
	return nil
}
