package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestMeshctl_VersionTakesOutputJSON: the README says every command takes
// -o json, for scripts. 'meshctl version -o json' exited 0 and printed the
// text line "meshctl dev (build 0)", so a script decoding it (to check the
// tool's version against the controller's) failed on the first byte.
func TestMeshctl_VersionTakesOutputJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"version", "-o", "json"}, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("meshctl version -o json: exit %d: %s", code, errOut.String())
	}
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Version == "" {
		t.Fatalf("meshctl version -o json: exit 0, stdout %q is not JSON: %v", out.String(), err)
	}
}
