package store

import "testing"

// TestBulkPageCache_Set: SQLite took the bulk page cache (it refuses it
// once any connection has initialised it).
func TestBulkPageCache_Set(t *testing.T) {
	if !bulkPageCache {
		t.Fatal("SQLite refused SQLITE_CONFIG_PAGECACHE")
	}
}
