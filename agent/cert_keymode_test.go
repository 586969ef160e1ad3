package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/models"
)

// TestCertificate_KeyModeRestoredOnApply: a certificate resource
// declares its key 0600. The key's mode drifted (a person's chmod, a
// restore from a backup, a config tool), and the next apply said the
// certificate "unchanged" and left the private key readable by every
// user, where a file resource whose mode drifted is written again. The
// mode is put back, and the apply says so.
func TestCertificate_KeyModeRestoredOnApply(t *testing.T) {
	a := testAgent(t)
	certSigningController(t, a)
	cert := models.Resource{ID: "web.cert", Module: "web", Build: 1, Kind: models.ResourceCertificate, Names: []string{"web.m1.mesh"},
		Path: "/etc/web/chain.pem", KeyPath: "/etc/web/key.pem", Mode: "0600", Lifetime: "1h"}
	for gen := int64(1); gen <= 2; gen++ {
		st := a.state.clone()
		acts, err := a.applyInFull(context.Background(), &models.DeclarationPayload{Schema: 2, Machine: "m1", Generation: gen, Resources: []models.Resource{cert}}, st)
		a.state = st
		if err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		key := filepath.Join(a.root.dir, "etc/web/key.pem")
		fi, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("generation %d applied (actions %+v), yet the private key %s is mode %04o, declared 0600", gen, acts, cert.KeyPath, fi.Mode().Perm())
		}
		if gen == 2 && (len(acts) != 1 || acts[0].Action != "updated" || !strings.Contains(acts[0].Detail, "/etc/web/key.pem mode 0600 (it was 0644)")) {
			t.Fatalf("generation 2 put the key's mode back but says %+v", acts)
		}
		// Drift before the next apply.
		if err := os.Chmod(key, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
