// Package mesh holds what belongs to the repository as a whole: the
// OpenAPI description of the controller's API and the JSON Schema of a
// build's manifest.
package mesh

import _ "embed"

// OpenAPI is openapi.yaml, served by the controller at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// ManifestSchema is schemas/manifest.json, the JSON Schema (draft 2020-12)
// of a build's manifest, served by the controller at /schemas/manifest.json.
//
//go:embed schemas/manifest.json
var ManifestSchema []byte

// HostUnit is dist/systemd/mesh-host.service, which the controller's
// /install.sh installs on a machine.
//
//go:embed dist/systemd/mesh-host.service
var HostUnit []byte
