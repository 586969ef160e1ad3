package mesh_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"mesh"
	"mesh/models"
)

// manifestSchema compiles schemas/manifest.json as the controller serves it.
func manifestSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(mesh.ManifestSchema))
	if err != nil {
		t.Fatalf("schemas/manifest.json: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// The schema's $id is relative (the path it is served at); it is
	// resolved against this URL, as a client that fetched it would.
	const url = "https://controller.example/schemas/manifest.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatalf("schemas/manifest.json does not compile: %v", err)
	}
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, manifest []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(manifest))
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, manifest)
	}
	return s.Validate(v)
}

var readmeManifest = regexp.MustCompile(`(?s)<<'JSON'\n(.*?)\nJSON\n`)

// goodManifests are the demo's manifests (the files the demo builds),
// the README's, and the schema's own examples.
func goodManifests(t *testing.T) map[string][]byte {
	t.Helper()
	good := map[string][]byte{}
	files, _ := filepath.Glob("cmd/mesh-controller/demo/*.json")
	if len(files) < 2 {
		t.Fatalf("the demo's manifests not found (got %v)", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		good[f] = b
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The README's manifests are the heredocs fed to manifest.json.
	for i, m := range readmeManifest.FindAllSubmatch(readme, -1) {
		good["README manifest "+string(rune('a'+i))] = m[1]
	}
	if len(good) < len(files)+1 {
		t.Error("no manifest found in README.md (a heredoc <<'JSON' … JSON)")
	}
	var schema struct {
		Examples []json.RawMessage `json:"examples"`
		Defs     struct {
			Resource struct {
				Examples []json.RawMessage `json:"examples"`
			} `json:"resource"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(mesh.ManifestSchema, &schema); err != nil {
		t.Fatal(err)
	}
	for i, ex := range schema.Examples {
		good["schema example "+string(rune('a'+i))] = ex
	}
	// The resource examples refer to one another (`after`), so they make
	// one manifest together.
	kinds := map[string]bool{}
	for _, ex := range schema.Defs.Resource.Examples {
		var r struct{ Kind string }
		if err := json.Unmarshal(ex, &r); err != nil {
			t.Fatal(err)
		}
		kinds[r.Kind] = true
	}
	together, err := json.Marshal(map[string]any{"resources": schema.Defs.Resource.Examples})
	if err != nil {
		t.Fatal(err)
	}
	good["resource examples"] = together
	for _, k := range []string{"file", "tree", "service"} {
		if !kinds[k] {
			t.Errorf("the schema has no resource example of kind %s", k)
		}
	}
	return good
}

// badManifests are refused by both the schema and the parser, each for
// one reason.
var badManifests = map[string]string{
	"UnknownField":       `{"resources": [{"name": "motd", "kind": "file", "path": "/etc/motd", "content": "x", "owner": "root"}]}`,
	"FileWithoutContent": `{"resources": [{"name": "motd", "kind": "file", "path": "/etc/motd"}]}`,
	"RelativeCommand":    `{"resources": [{"name": "web", "kind": "service", "command": ["bin/web"]}]}`,
	"UncleanPath":        `{"resources": [{"name": "runtime", "kind": "tree", "path": "/opt/../etc"}]}`,
	"BadMode":            `{"resources": [{"name": "motd", "kind": "file", "path": "/etc/motd", "content": "x", "mode": "644"}]}`,
	"TwoChecks":          `{"resources": [{"name": "web", "kind": "service", "command": ["/bin/web"], "check": {"tcp": "127.0.0.1:80", "http": "http://127.0.0.1/"}}]}`,
	"UpperCaseName":      `{"resources": [{"name": "Web", "kind": "service", "command": ["/bin/web"]}]}`,
	"UnknownKind":        `{"resources": [{"name": "web", "kind": "container", "command": ["/bin/web"]}]}`,
	"BadArtifactDigest":  `{"resources": [{"name": "runtime", "kind": "tree", "path": "/opt/x", "artifact": {"digest": "sha256:abc"}}]}`,
	"RootPath":           `{"resources": [{"name": "runtime", "kind": "tree", "path": "/"}]}`,
}

// TestManifestSchema_DemoAndExamplesValid: every manifest the demo builds
// and every example the schema gives is valid against it.
func TestManifestSchema_DemoAndExamplesValid(t *testing.T) {
	s := manifestSchema(t)
	for name, m := range goodManifests(t) {
		t.Run(name, func(t *testing.T) {
			if err := validate(t, s, m); err != nil {
				t.Errorf("refused by the schema: %v\n%s", err, m)
			}
		})
	}
}

// TestManifestSchema_RefusesBad: five (and more) bad manifests are
// refused, each for its reason.
func TestManifestSchema_RefusesBad(t *testing.T) {
	s := manifestSchema(t)
	if len(badManifests) < 5 {
		t.Fatalf("only %d bad manifests", len(badManifests))
	}
	for name, m := range badManifests {
		t.Run(name, func(t *testing.T) {
			if err := validate(t, s, []byte(m)); err == nil {
				t.Errorf("the schema accepts %s", m)
			}
		})
	}
}

// TestManifestSchema_AgreesWithParser: for every case above, the schema
// and the controller's parser (models.ParseManifest) give the same
// answer, so the schema describes what the controller takes, not a wish.
func TestManifestSchema_AgreesWithParser(t *testing.T) {
	s := manifestSchema(t)
	cases := map[string][]byte{}
	for name, m := range goodManifests(t) {
		cases["good/"+name] = m
	}
	for name, m := range badManifests {
		cases["bad/"+name] = []byte(m)
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			schemaErr := validate(t, s, m)
			_, parseErr := models.ParseManifest(m)
			if (schemaErr == nil) != (parseErr == nil) {
				t.Errorf("schema says %v, parser says %v\n%s", schemaErr, parseErr, m)
			}
		})
	}
}
