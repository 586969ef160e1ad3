// Package version holds the build's identity, set at link time:
//
//	go build -ldflags "-X mesh/version.Version=1.4.2 -X mesh/version.Build=42"
//
// The controller compares Build with the builds of the `controller` module
// and with the store's schema, so releases and tests always set both.
package version

import "strconv"

var (
	// Version is the human version of this binary ("dev" when unset).
	Version = "dev"
	// Build is the build number of the module this binary was built as.
	Build = "0"
)

// BuildNumber is Build as a number; 0 when unset or malformed.
func BuildNumber() int64 {
	n, err := strconv.ParseInt(Build, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// String is what `--version` prints.
func String() string { return Version + " (build " + Build + ")" }
