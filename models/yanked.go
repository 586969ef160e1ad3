package models

import "sort"

// YankedRun is a build a machine runs that was yanked since: it keeps
// running there (nothing is taken away), and is shown as yanked.
type YankedRun struct {
	Module string `json:"module"`
	Build  int64  `json:"build"`
	Reason string `json:"reason"`
}

// YankedRunning picks, from what a machine reports running, the builds
// that are yanked (yanked: module → build number → reason), by module.
func YankedRunning(running map[string]RunningBuild, yanked map[string]map[int64]string) []YankedRun {
	var out []YankedRun
	for mod, r := range running {
		if reason, ok := yanked[mod][r.Build]; ok {
			out = append(out, YankedRun{Module: mod, Build: r.Build, Reason: reason})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Module < out[j].Module })
	return out
}
