package models

import "strconv"

// SizeWords says n bytes as a size is given to mesh's flags: in the
// largest of GiB, MiB and KiB that divides it ("64KiB"), else in bytes.
func SizeWords(n int64) string {
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
