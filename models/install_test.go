package models

import (
	"testing"
	"time"
)

func TestInstallReleases(t *testing.T) {
	at := time.Now()
	rel := func(v, arch, state string, tried bool) Release {
		r := Release{Version: v, OS: "linux", Arch: arch, State: state, Digest: "sha256:" + v + arch}
		if tried {
			r.RolledOutAt = &at
		}
		return r
	}
	// Newest first, as the store lists them. 2.0.0 and 3.0.0 were never
	// rolled out; 1.0.0 was, on both platforms; 1.1.0 and 1.2.0 on riscv64
	// never were.
	rs := []Release{rel("3.0.0", "amd64", ReleaseFailed, false), rel("2.0.0", "amd64", ReleaseReady, false),
		rel("1.2.0", "riscv64", ReleaseReady, false), rel("1.1.0", "riscv64", ReleaseReady, false),
		rel("1.0.0", "amd64", ReleaseReady, true), rel("1.0.0", "arm64", ReleaseReady, true)}
	for _, tc := range []struct {
		name, def, platform, want string
	}{
		{"DefaultWins", "1.0.0", "linux/amd64", "1.0.0"},
		{"NoDefaultNewestTried", "", "linux/amd64", "1.0.0"},
		{"AnUntriedDefaultIsNotInstalled", "2.0.0", "linux/amd64", "1.0.0"},
		{"FailedNeverInstalled", "3.0.0", "linux/amd64", "1.0.0"},
		{"DefaultNotBuiltForPlatform", "2.0.0", "linux/arm64", "1.0.0"},
		{"NothingTriedNewestReady", "", "linux/riscv64", "1.2.0"},
		{"NoneForPlatform", "", "linux/s390x", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if r := InstallReleases(tc.def, rs)[tc.platform]; r != nil {
				got = r.Version
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("Installable", func(t *testing.T) {
		if !IsInstallable("sha256:2.0.0amd64", rs) || IsInstallable("sha256:3.0.0amd64", rs) || IsInstallable("sha256:x", rs) {
			t.Error("only a ready release's digest is installable")
		}
	})
}
