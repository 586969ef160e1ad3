package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A release of the fleet's default version uploaded for another platform
// after its rollout was done waits for a rollout of its own (README, "Host
// upgrades"), yet `meshctl releases ls` said "fleet default" on its row as
// on the rolled out one's.
func TestMeshctl_ADefaultVersionNotRolledOutOnItsPlatformIsNotSaidDefault(t *testing.T) {
	release := func(arch, rolledOut string) string {
		return `{"version": "1.5.0", "os": "linux", "arch": "` + arch + `", "digest": "sha256:` + strings.Repeat("a", 64) + `", "size": 10,
			"schemas": "1,2", "key_id": "k", "signature": "", "state": "ready", "failure": "", "failed_at": null, "created_by": "user:admin",
			"created_at": "2026-12-01T10:00:00Z", "rolled_out_at": ` + rolledOut + `, "fleet_default": true}`
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"items": [` + release("arm64", "null") + `, ` + release("amd64", `"2026-12-01T11:00:00Z"`) + `], "next_cursor": ""}`))
	}))
	defer srv.Close()
	t.Setenv("MESH_CONTROLLER", srv.URL)
	t.Setenv("MESH_TOKEN", "t")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"releases", "ls"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("meshctl releases ls: exit %d: %s", code, errOut.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		switch {
		case strings.Contains(line, "linux/arm64") && strings.Contains(line, "fleet default"):
			t.Errorf("the default version's release never rolled out on its platform is said the fleet default:\n%s", out.String())
		case strings.Contains(line, "linux/amd64") && !strings.Contains(line, "fleet default"):
			t.Errorf("the rolled out release of the default version is not said the fleet default:\n%s", out.String())
		}
	}
}
