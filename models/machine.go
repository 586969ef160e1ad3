package models

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Bump is one machine's generation after a committed change.
type Bump struct {
	MachineID  int64
	Name       string
	Generation int64
}

// Default thresholds of the state rules (settings of the controller:
// --offline-after, --unhealthy-after).
const (
	// OfflineAfter: a host holds a poll open for up to 50 s and reconnects
	// at once, so three missed polls' worth of silence means it is gone.
	OfflineAfter = 3 * time.Minute
	// UnhealthyAfter: three of the host's check intervals (30 s each), so
	// a service still starting is not flagged.
	UnhealthyAfter = 90 * time.Second
)

// StateRules say a machine's state from its records. The precedence is
// written once, here and in DESIGN.md, and api, web and metrics all use
// it: conflict > revoked > offline > rolled_back > upgrading > failed > behind >
// refused > rejected > unhealthy > current. A state word is shown only
// when what it claims was checked: current means the host reported
// applying the latest generation and no declared check has failed past
// the grace.
type StateRules struct {
	OfflineAfter   time.Duration
	UnhealthyAfter time.Duration
}

// DefaultStateRules are the rules with the default thresholds.
var DefaultStateRules = StateRules{OfflineAfter: OfflineAfter, UnhealthyAfter: UnhealthyAfter}

// State is m's state at now, its host last seen at lastSeen.
func (r StateRules) State(m *Machine, lastSeen *time.Time, now time.Time) string {
	switch {
	case m.Conflict:
		return StateConflict
	case m.RevokedAt != nil:
		// Its certificate and token are refused: nothing it says is
		// heard, so no other word about it can be checked.
		return StateRevoked
	case lastSeen == nil && now.Sub(m.CreatedAt) > r.OfflineAfter, lastSeen != nil && now.Sub(*lastSeen) > r.OfflineAfter:
		// Never polled: offline once it has been enrolled that long.
		return StateOffline
	case m.LastOutcome == OutcomeRolledBack:
		return StateRolledBack
	case m.TargetHostVersion != "" && m.HostVersion != m.TargetHostVersion:
		return StateUpgrading
	case m.LastOutcome == OutcomeFailed && m.LastOutcomeGen >= m.Generation:
		// Its host failed the latest generation, sent again after it
		// had finished it (its state lost): not what was applied before.
		return StateFailed
	case m.Generation > m.FinishedGen:
		if m.LastOutcome == OutcomeFailed {
			return StateFailed
		}
		return StateBehind
	case m.HeldBack != "":
		// Applied, but what was applied is held-back content: the
		// machine is not what it was declared to be.
		return StateBehind
	}
	switch m.LastOutcome {
	case OutcomeRefused:
		return StateRefused
	case OutcomeRejected:
		return StateRejected
	}
	if r.Unhealthy(m, now) {
		return StateUnhealthy
	}
	return StateCurrent
}

// LastSeen is when a machine's host was last heard from: the later of
// what this instance heard (a poll held now, or one since its last flush
// to the store; nil if none) and what the store says. A host that moved
// to another instance is heard there, and the store has it from there.
func LastSeen(heard *time.Time, m *Machine) *time.Time {
	if heard == nil || m.LastSeen != nil && m.LastSeen.After(*heard) {
		return m.LastSeen
	}
	return heard
}

// ReleaseRefused is the reason a host gives for refusing a host release:
// the words RefusedTarget recognises.
func ReleaseRefused(version, why string) string {
	return "host release " + version + " refused: " + why
}

// RolledBackReason is the reason of a host's rolled_back report: the
// release it left, the one it went back to, and why.
func RolledBackReason(from, to, why string) string {
	return "rolled back from " + from + " to " + to + ": " + why
}

// RolledBackFrom is the release a rolled_back report's reason says it
// left (false: the reason does not say, as RolledBackReason writes it).
func RolledBackFrom(reason string) (string, bool) {
	rest, ok := strings.CutPrefix(reason, "rolled back from ")
	if !ok {
		return "", false
	}
	from, _, ok := strings.Cut(rest, " to ")
	return from, ok && from != ""
}

// RefusesRelease reports whether a report is its host refusing a host
// release (any): the words ReleaseRefused makes.
func RefusesRelease(outcome, reason string) bool {
	v, ok := strings.CutPrefix(reason, "host release ")
	return outcome == OutcomeRefused && ok && strings.Contains(v, " refused: ")
}

// RefusedTarget reports whether a machine being upgraded to target has a
// last report (outcome, reason) of its host refusing that release: it is
// still "upgrading", and why it will not is shown beside the word.
func RefusedTarget(target, outcome, reason string) bool {
	return target != "" && outcome == OutcomeRefused && strings.HasPrefix(reason, ReleaseRefused(target, ""))
}

// Unhealthy reports whether a declared check of m has failed for longer
// than the grace.
func (r StateRules) Unhealthy(m *Machine, now time.Time) bool {
	return m.Health == HealthFailing && m.HealthSince != nil && now.Sub(*m.HealthSince) >= r.UnhealthyAfter
}

// HealthOf reads a report's checks: none when no check ran, failing with
// the check that has failed longest, else passing. failing is each
// failing check's "since" (JSON, kept in the machine's health_failing): a
// check failing in one report and the next failed in between, since a
// host reports each change of a check's result, so each keeps its own
// "since" across reports — not only the one shown (a second check
// failing for minutes started again from the report in which the first
// recovered, and the machine read current, "within the grace").
func HealthOf(m *Machine, checks []CheckResult, now time.Time) (health, check, detail string, since time.Time, failing string) {
	if len(checks) == 0 {
		return HealthNone, "", "", now, ""
	}
	before := m.failingSince()
	sinces := map[string]time.Time{}
	for _, c := range checks {
		if c.OK {
			continue
		}
		// "Failing since" is the host's time of the look only between
		// the controller's last word of the machine's health and now: a
		// host's clock ahead of ours (or a host lying) would put it in
		// the future, where it never failed long enough to be unhealthy;
		// one behind, before anything was heard of it, skipping the
		// grace. Otherwise it is when the controller heard it.
		s := now
		if !c.At.IsZero() && c.At.Before(now) && m.HealthAt != nil && c.At.After(*m.HealthAt) {
			s = c.At
		}
		if t, ok := before[c.Resource]; ok {
			s = t
		}
		if _, dup := sinces[c.Resource]; dup {
			continue
		}
		sinces[c.Resource] = s
		if health == "" || s.Before(since) {
			health, check, detail, since = HealthFailing, c.Resource, c.Detail, s
		}
	}
	if health == HealthFailing {
		if len(sinces) > MaxFailingKept {
			// What a host says is bounded where it is kept: the checks
			// failing longest (a report may carry any number of them).
			names := slices.SortedFunc(maps.Keys(sinces), func(a, b string) int {
				return cmp.Or(sinces[a].Compare(sinces[b]), strings.Compare(a, b))
			})
			for _, n := range names[MaxFailingKept:] {
				delete(sinces, n)
			}
		}
		b, _ := json.Marshal(failingChecks{At: now, Since: sinces})
		return health, check, detail, since, string(b)
	}
	since = now
	if m.Health == HealthPassing && m.HealthSince != nil {
		since = *m.HealthSince
	}
	return HealthPassing, "", "", since, ""
}

// alsoFailing says which other checks of m fail beside the one shown
// ("" when none, or when the row was read without them): three by name,
// then how many more.
func (m *Machine) alsoFailing() string {
	var others []string
	for c := range m.failingSince() {
		if c != m.HealthCheck {
			others = append(others, c)
		}
	}
	if len(others) == 0 {
		return ""
	}
	slices.Sort(others)
	more := ""
	if len(others) > 3 {
		more = fmt.Sprintf(" and %d more", len(others)-3)
		others = others[:3]
	}
	return " (also failing: " + strings.Join(others, ", ") + more + ")"
}

// MaxFailingKept is how many failing checks a machine keeps the "since"
// of (health_failing): those failing longest.
const MaxFailingKept = 16

// failingChecks is health_failing: each failing check's since, as of the
// report that wrote it (At, its health_at).
type failingChecks struct {
	At    time.Time            `json:"at"`
	Since map[string]time.Time `json:"since"`
}

// failingSince is when each of m's failing checks began failing, as its
// reports said: none unless m is failing. Taken only if written with the
// machine's last word of its health (health_at): a controller of a
// release before health_failing, sharing the store in a rolling upgrade
// or run again after a rollback, moves the health it knows and leaves
// this as it was, and a check failing again took the "since" of a spell
// that had ended. Else, as for a machine failing before health_failing
// was kept, the one failing check's.
func (m *Machine) failingSince() map[string]time.Time {
	if m.Health != HealthFailing {
		return nil
	}
	var f failingChecks
	if m.HealthFailing != "" && json.Unmarshal([]byte(m.HealthFailing), &f) == nil && m.HealthAt != nil &&
		f.At.Sub(*m.HealthAt).Abs() < time.Millisecond {
		return f.Since
	}
	if m.HealthCheck != "" && m.HealthSince != nil {
		return map[string]time.Time{m.HealthCheck: *m.HealthSince}
	}
	return nil
}

// ConflictWhy says why a machine is in conflict, from the generation its
// host finished and the one the store holds: past it (a store restored
// from a backup older than what the host applied), or at or behind it by
// a send the store never made (a restored store that moved on over the
// same numbers).
func ConflictWhy(hostGen, storeGen int64) string {
	if hostGen > storeGen {
		return fmt.Sprintf("the host finished generation %d, newer than the store's %d", hostGen, storeGen)
	}
	return fmt.Sprintf("the host finished generation %d by a send this store never made (a store restored from a backup?); the store holds %d", hostGen, storeGen)
}

// Polled says whether a machine's host has polled, by the time it was last
// seen: enrolment sets that time to its own, and a machine seen only then
// was never polled by its host. Any later time is a poll: mesh-host polls
// the moment it has enrolled, and one that polled, applied and reported
// within a second of it and was heard from no more (it died) was said
// never to have polled, for good.
func Polled(seen *time.Time, enrolled time.Time) bool {
	return seen != nil && seen.After(enrolled)
}
