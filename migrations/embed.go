// Package migrations holds the store's schema as SQL, one folder per
// dialect with the same numbering. Append-only: a released migration is
// never edited. Migrations expand before they contract, so that a
// controller one build behind its store can still serve.
package migrations

import "embed"

// FS holds postgres/*.sql and sqlite/*.sql.
//
//go:embed postgres/*.sql sqlite/*.sql
var FS embed.FS

// Max, when not 0, is the newest migration this build knows: a build made
// with an older schema (tests build one with -tags mesh_schema3 to prove a
// controller behind its store still serves).
var Max int64
