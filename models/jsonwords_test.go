package models

import (
	"strings"
	"testing"
)

// TestParseManifest_TypeErrorsInJSONWords: a manifest of the wrong shape
// is refused saying which field, what JSON it must be and where, never
// the Go type it decodes into.
func TestParseManifest_TypeErrorsInJSONWords(t *testing.T) {
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"ResourcesNotArray", `{"resources": "x"}`, `field resources must be an array, not a string (at byte 17)`},
		{"ModeNumber", `{"resources": [{"name": "a", "kind": "file", "path": "/a", "content": "", "mode": 644}]}`,
			`field resources.mode must be a string, not a number (at byte 85)`},
		{"NotObject", `[1]`, `the document must be an object, not an array`},
		{"Truncated", `{"resources": [`, `the JSON ends before its value does`},
		{"Syntax", `{"resources": [}`, `malformed JSON at byte 16`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tc.manifest))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "models.") || strings.Contains(err.Error(), "Go ") {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}
