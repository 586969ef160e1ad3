//go:build mesh_schema3

package migrations

// A build that stops at migration 3, as an older controller build would.
func init() { Max = 3 }
