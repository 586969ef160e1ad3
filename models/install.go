package models

// InstallReleases picks, for each platform ("linux/amd64"), the host
// release a freshly installed machine starts with: the fleet's default
// version (def) when a rollout tried it on that platform (RolledOutAt),
// else the newest release a rollout tried there, else the newest ready
// release for it (a platform nothing was tried on still needs a binary).
// rs is every release, newest first. A machine installed with the default
// needs no upgrade at its first poll; one installed with a newer one keeps
// it (a host is never sent an older release than it runs unless a rollout
// says so).
func InstallReleases(def string, rs []Release) map[string]*Release {
	out := map[string]*Release{}
	rank := func(r *Release) int {
		switch {
		case r.Version == def && r.RolledOutAt != nil:
			return 2
		case r.RolledOutAt != nil:
			return 1
		}
		return 0
	}
	for i := range rs {
		r := &rs[i]
		if r.State != ReleaseReady {
			continue
		}
		p := r.OS + "/" + r.Arch
		if cur := out[p]; cur == nil || rank(r) > rank(cur) {
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
