package store

import (
	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// pageCacheBulk is each SQLite connection's page cache, allocated at once
// when the connection first caches a page and kept until it closes (in
// SQLite's terms N of SQLITE_CONFIG_PAGECACHE; negative: KiB), capped by
// the connection's cache_size (2,000 KiB by default).
const pageCacheBulk = -2048

// bulkPageCache is whether SQLite took the setting.
var bulkPageCache bool

// In WAL mode SQLite empties a connection's page cache at the start of
// every transaction that follows another connection's commit — in a
// fan-out, every compose chunk's snapshot and every group of send rows.
// Each cached page was a malloc of its own, so emptying freed each one
// and the next reads allocated them again, and the embedded engine's
// allocator handed the freed regions back to the kernel and faulted them
// in again: a quarter of the snapshot read's CPU in a 10,000-host
// fan-out. Pages from the connection's bulk allocation go back to its
// free list instead. It must be set before SQLite initialises (the
// first connection), so it is set when this package loads.
func init() {
	tls := libc.NewTLS()
	defer tls.Close()
	va := libc.NewVaList(uintptr(0), int32(0), int32(pageCacheBulk))
	if va == 0 {
		return
	}
	defer libc.Xfree(tls, va)
	bulkPageCache = sqlite3.Xsqlite3_config(tls, sqlite3.SQLITE_CONFIG_PAGECACHE, va) == sqlite3.SQLITE_OK
}
