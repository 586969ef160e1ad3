package models

import (
	"encoding/json"
	"fmt"
)

// Tier is one step of a module's plans: a count of machines or a percent.
type Tier struct {
	Machines int `json:"machines,omitempty"`
	Percent  int `json:"percent,omitempty"`
}

// DefaultTiers: one canary machine, then all.
var DefaultTiers = []Tier{{Machines: 1}, {Percent: 100}}

// The JSON-in-text columns are written only by the controller; one that
// does not decode is a damaged row, said as such, never read as empty.

// TierList is the module's tiers (the defaults when none are set).
func (m *Module) TierList() ([]Tier, error) {
	var ts []Tier
	if err := decodeColumn("tiers of module "+m.Name, m.Tiers, &ts); err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		ts = DefaultTiers
	}
	return ts, nil
}

// SourcePathList is the repository paths whose changes build the module
// (none: the whole repository).
func (m *Module) SourcePathList() ([]string, error) {
	sp := []string{}
	return sp, decodeColumn("source paths of module "+m.Name, m.SourcePaths, &sp)
}

// RunningBuilds is what the machine's host last reported running, by module.
func (m *Machine) RunningBuilds() (map[string]RunningBuild, error) {
	r := map[string]RunningBuild{}
	if m.Running == "{}" {
		return r, nil // a machine that reports nothing yet: no decoder for it
	}
	return r, decodeColumn("running builds of machine "+m.Name, m.Running, &r)
}

func decodeColumn(what, s string, v any) error {
	if s == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("%s: the stored value does not decode: %w", what, err)
	}
	return nil
}
