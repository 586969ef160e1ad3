package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// asAdmin points meshctl, run in this process, at e as its admin (a config
// dir of the test's own) and returns a runner: stdout, stderr, exit code.
func asAdmin(t *testing.T, e *ctltest.Env) func(args ...string) (string, string, int) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	t.Setenv("MESH_CONTROLLER", e.URL)
	t.Setenv("MESH_TOKEN", e.Admin)
	return func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}
}
