package models

import "fmt"

// A plan's host step: a plan told to roll out a host release first
// (host_release_first) starts a rollout of that release to its machines
// that need it, by the rollout mechanism every host release uses (trial,
// canary first, halt on a failed trial); its tiers wait until that rollout
// is done, so a tier's deadline starts after it, never while hosts are
// still being upgraded.

// NeededSchema is the lowest declaration schema that expresses every
// resource of the manifest. Composing substitutes values, never a
// resource's kind or its check's kind, so what a build needs is known
// before any machine is composed.
func (m *Manifest) NeededSchema() int {
	need := SchemaV1
	for i := range m.Resources {
		mr := &m.Resources[i]
		r := Resource{Kind: mr.Kind, Check: mr.Check, Names: mr.Names, KeyPath: mr.KeyPath, Owner: mr.Owner,
			Lifetime: mr.Lifetime, OnRenew: mr.OnRenew}
		need = max(need, ResourceSchema(&r))
	}
	return need
}

// CheckHostReleaseFirst refuses a plan's host release that cannot carry the
// build: one whose build for some platform decodes no schema that
// expresses what the build needs (rolling it out first would leave the
// plan held back all the same). platforms are the release's builds, each
// with the schemas it records.
func CheckHostReleaseFirst(version string, platforms []Release, module string, build int64, need int) error {
	for _, r := range platforms {
		if _, ok := SchemasOf(r.Schemas).Pick(need); !ok {
			return Invalid("host_release_first", fmt.Sprintf("host release %s for %s/%s decodes %s; build %d of %s needs schema %d",
				version, r.OS, r.Arch, SchemasOf(r.Schemas), build, module, need))
		}
	}
	return nil
}

// NeedsHostStep says whether a machine whose host advertises host is
// upgraded by a plan's host step to a release that decodes release: when
// its host lacks a schema the release decodes. One that already decodes
// all of it is left as it is (never taken back to an older host).
func NeedsHostStep(host, release Schemas) bool {
	have := map[int]bool{}
	for _, n := range host {
		have[n] = true
	}
	for _, n := range release {
		if !have[n] {
			return true
		}
	}
	return false
}

// JudgeHostStep is what a plan's host step has come to, from its rollout:
// done (the tiers may start), the reason the plan halts, or neither (the
// rollout is still running or paused: the tiers wait). ro is nil when no
// rollout is recorded for it.
func JudgeHostStep(version string, ro *Rollout) (done bool, halt string) {
	if ro == nil {
		return false, fmt.Sprintf("host step: no rollout of %s is recorded for the plan", version)
	}
	switch ro.State {
	case RolloutDone:
		return true, ""
	case RolloutHalted, RolloutCancelled:
		s := fmt.Sprintf("host step: rollout of %s %s", ro.Version, ro.State)
		if ro.Reason != "" {
			s += ": " + ro.Reason
		}
		return false, s
	}
	return false, ""
}
