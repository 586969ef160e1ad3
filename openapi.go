// Package mesh holds what belongs to the repository as a whole: the
// OpenAPI description of the controller's API.
package mesh

import _ "embed"

// OpenAPI is openapi.yaml, served by the controller at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
