package models

import "testing"

func TestInstallReleases(t *testing.T) {
	rel := func(v, arch, state string) Release {
		return Release{Version: v, OS: "linux", Arch: arch, State: state, Digest: "sha256:" + v + arch}
	}
	// Newest first, as the store lists them.
	rs := []Release{rel("3.0.0", "amd64", ReleaseFailed), rel("2.0.0", "amd64", ReleaseReady),
		rel("1.0.0", "amd64", ReleaseReady), rel("1.0.0", "arm64", ReleaseReady)}
	for _, tc := range []struct {
		name, def, platform, want string
	}{
		{"DefaultWins", "1.0.0", "linux/amd64", "1.0.0"},
		{"NoDefaultNewestReady", "", "linux/amd64", "2.0.0"},
		{"FailedNeverInstalled", "3.0.0", "linux/amd64", "2.0.0"},
		{"DefaultNotBuiltForPlatform", "2.0.0", "linux/arm64", "1.0.0"},
		{"NoneForPlatform", "", "linux/riscv64", ""},
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
