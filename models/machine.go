package models

import "time"

// Bump is one machine's generation after a committed change.
type Bump struct {
	MachineID  int64
	Name       string
	Generation int64
}

// OfflineAfter is how long without a poll before a machine is offline.
// A host holds a poll open for up to 50 s and reconnects at once, so three
// missed polls' worth of silence means it is gone.
const OfflineAfter = 3 * time.Minute

// MachineState computes a machine's state from its records, in DESIGN.md's
// words. It never says current unless the host reported applying the
// machine's latest generation.
func MachineState(m *Machine, lastSeen *time.Time, now time.Time) string {
	switch {
	case m.Conflict:
		return StateConflict
	case lastSeen == nil || now.Sub(*lastSeen) > OfflineAfter:
		return StateOffline
	case m.LastOutcome == OutcomeRolledBack:
		return StateRolledBack
	case m.TargetHostVersion != "" && m.HostVersion != m.TargetHostVersion:
		return StateUpgrading
	case m.Generation > m.FinishedGen:
		if m.LastOutcome == OutcomeFailed {
			return StateFailed
		}
		return StateBehind
	}
	switch m.LastOutcome {
	case OutcomeRefused:
		return StateRefused
	case OutcomeRejected:
		return StateRejected
	}
	return StateCurrent
}
