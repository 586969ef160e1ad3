package agent

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"

	"mesh/models"
)

// signedPayload signs a declaration for m1 with the trusted key.
func signedPayload(t *testing.T, d models.DeclarationPayload) []byte {
	t.Helper()
	d.Machine = "m1"
	d.Generation = 7
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return envelopeOf(t, b, models.Signature{KeyID: "k1", Sig: ed25519.Sign(fuzzKey, b)})
}

// TestVerify_Schemas: this host decodes schemas 1 and 2, refuses others,
// and refuses schema-2 content in a declaration that says schema 1 (a
// schema-1 host would refuse its fields, whole).
func TestVerify_Schemas(t *testing.T) {
	if SchemaHeader != "1,2" {
		t.Fatalf("SchemaHeader = %q", SchemaHeader)
	}
	cert := models.Resource{ID: "w.cert", Kind: models.ResourceCertificate, Names: []string{"w.m1.mesh"}, Path: "/etc/w/chain.pem", KeyPath: "/etc/w/key.pem"}
	tlsSvc := models.Resource{ID: "w.svc", Kind: "service", Command: []string{"/opt/w/run"}, Check: &models.Check{TLS: "127.0.0.1:1", ServerName: "w.m2.mesh"}}
	for _, tc := range []struct {
		name   string
		d      models.DeclarationPayload
		refuse string
	}{
		{"OK_Schema1", models.DeclarationPayload{Schema: 1, Resources: []models.Resource{}}, ""},
		{"OK_Schema2Certificate", models.DeclarationPayload{Schema: 2, Resources: []models.Resource{cert, tlsSvc}}, ""},
		{"OK_Schema2WithSchema1Content", models.DeclarationPayload{Schema: 2, Resources: []models.Resource{}}, ""},
		{"ErrSchema3", models.DeclarationPayload{Schema: 3, Resources: []models.Resource{}}, "bad field: schema 3, this host decodes 1,2"},
		{"ErrCertificateInSchema1", models.DeclarationPayload{Schema: 1, Resources: []models.Resource{cert}}, "a schema-1 declaration with content of schema 2"},
		{"ErrTLSCheckInSchema1", models.DeclarationPayload{Schema: 1, Resources: []models.Resource{tlsSvc}}, "a schema-1 declaration with content of schema 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify(signedPayload(t, tc.d), fuzzTrust(), "m1")
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.refuse) {
				t.Fatalf("err = %v, want a refusal saying %q", err, tc.refuse)
			}
		})
	}
}

// TestCheckResources_Certificates: what the host refuses of a certificate
// resource, with the words it journals.
func TestCheckResources_Certificates(t *testing.T) {
	svc := models.Resource{ID: "w.svc", Kind: "service", Command: []string{"/opt/w/run"}}
	cert := func(f func(r *models.Resource)) *models.DeclarationPayload {
		r := models.Resource{ID: "w.cert", Kind: models.ResourceCertificate, Names: []string{"w.m1.mesh"},
			Path: "/etc/w/chain.pem", KeyPath: "/etc/w/key.pem", OnRenew: []models.OnRenew{{Service: "w.svc", Signal: "HUP"}}}
		f(&r)
		return &models.DeclarationPayload{Schema: 2, Resources: []models.Resource{svc, r}}
	}
	for _, tc := range []struct {
		name   string
		d      *models.DeclarationPayload
		refuse string
	}{
		{"OK", cert(func(*models.Resource) {}), ""},
		{"ErrKeyOutsideRoots", cert(func(r *models.Resource) { r.KeyPath = "/root/.ssh/key.pem" }), "escape: w.cert: path /root/.ssh/key.pem is outside the allowed roots"},
		{"ErrChainOutsideRoots", cert(func(r *models.Resource) { r.Path = "/srv/chain.pem" }), "escape: w.cert: path /srv/chain.pem is outside the allowed roots"},
		{"ErrKeyNotClean", cert(func(r *models.Resource) { r.KeyPath = "/etc/w/../../root/k" }), "is not clean"},
		{"ErrNoNames", cert(func(r *models.Resource) { r.Names = nil }), "names 0 DNS names"},
		{"ErrWildcard", cert(func(r *models.Resource) { r.Names = []string{"*.mesh"} }), `label "*" is not lowercase`},
		{"ErrOneFile", cert(func(r *models.Resource) { r.KeyPath = r.Path }), "one file"},
		{"ErrLifetime", cert(func(r *models.Resource) { r.Lifetime = "1s" }), "outside 10s"},
		{"ErrRenewsNoService", cert(func(r *models.Resource) { r.OnRenew = []models.OnRenew{{Service: "w.db"}} }), "renews w.db, which the declaration does not name as a service"},
		{"ErrSignal", cert(func(r *models.Resource) { r.OnRenew = []models.OnRenew{{Service: "w.svc", Signal: "KILL"}} }), `signals w.svc with "KILL"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkResources(tc.d, []string{"/etc", "/opt"})
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.refuse) {
				t.Fatalf("err = %v, want a refusal saying %q", err, tc.refuse)
			}
		})
	}
}
