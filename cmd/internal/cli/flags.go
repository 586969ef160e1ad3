package cli

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"mesh/models"
)

// ByteSize is a flag of bytes: a number, or one with KiB, MiB or GiB (or
// B), said back as it would be given (models.SizeWords: "1MiB", not
// "1048576").
type ByteSize int64

func (b *ByteSize) String() string { return models.SizeWords(int64(*b)) }

// Type names the flag's value in --help.
func (b *ByteSize) Type() string { return "size" }

// Set reads a size; a refusal quotes it as it was given.
func (b *ByteSize) Set(v string) error {
	given, mult := v, int64(1)
	for _, u := range []struct {
		s string
		n int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if n, ok := strings.CutSuffix(v, u.s); ok {
			v, mult = n, u.n
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q: a positive size in bytes, KiB, MiB or GiB", given)
	}
	*b = ByteSize(n * mult)
	return nil
}

// LogLevel reads a --log-level word, refusing one it would otherwise
// ignore (served at info).
func LogLevel(word string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(word)); err != nil {
		return l, Usagef("--log-level %q: debug, info, warn or error", word)
	}
	return l, nil
}
