package models

import "testing"

func TestSizeWords(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1 << 10: "1KiB", 64 << 10: "64KiB", 1536 << 10: "1536KiB", 512 << 20: "512MiB", 2 << 30: "2GiB"} {
		if got := SizeWords(n); got != want {
			t.Errorf("SizeWords(%d) = %q, want %q", n, got, want)
		}
	}
}
