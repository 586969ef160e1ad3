package models

// InstallReleases picks, for each platform ("linux/amd64"), the host
// release a freshly installed machine starts with: the fleet's default
// version (def) when it is built for that platform, else the newest ready
// release for it. rs is every release, newest first. A machine installed
// with the default needs no upgrade at its first poll; one installed with
// a newer one keeps it (a host is never sent an older release than it
// runs unless a rollout says so).
func InstallReleases(def string, rs []Release) map[string]*Release {
	out := map[string]*Release{}
	for i := range rs {
		r := &rs[i]
		if r.State != ReleaseReady {
			continue
		}
		p := r.OS + "/" + r.Arch
		switch cur := out[p]; {
		case cur == nil:
			out[p] = r
		case r.Version == def && cur.Version != def:
			out[p] = r
		}
	}
	return out
}

// IsInstallable reports whether digest is the binary of a ready host
// release: only those are served to an installer without a token.
func IsInstallable(digest string, rs []Release) bool {
	for _, r := range rs {
		if r.Digest == digest && r.State == ReleaseReady {
			return true
		}
	}
	return false
}
