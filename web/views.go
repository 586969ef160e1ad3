package web

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/a-h/templ"

	"mesh/models"
)

// Page is what every page's layout needs.
type Page struct {
	Title  string
	Viewer viewer
	CSS    string
	Icon   string
	HTMX   string
	Path   string
	Behind string // why this controller is behind its store, if it is
}

// MachineRow is one machine on the overview.
type MachineRow struct {
	Name        string
	State       string
	Badge       string // the state in words, with why
	Since       string // when it became (or was last) true
	Generation  int64
	Applied     int64
	HostVersion string
	Target      string
	LastSeen    string
}

// StateCount is how many machines are in a state.
type StateCount struct {
	State string
	N     int
}

// AllStates in the order the overview counts them.
var AllStates = []string{models.StateCurrent, models.StateUnhealthy, models.StateBehind, models.StateRefused, models.StateFailed,
	models.StateRejected, models.StateConflict, models.StateRevoked, models.StateOffline, models.StateUpgrading, models.StateRolledBack}

// Overview is the overview page's data.
type Overview struct {
	Rows   []MachineRow
	Counts []StateCount
	Total  int
	// Matching is how many machines the filter matches; Rows holds the
	// first OverviewRows of them.
	Matching int
	State    string
	Q        string
	// Legend says the thresholds behind offline and unhealthy.
	Legend string
	// Record says how far back sends, reports and declarations go.
	Record string
}

// OverviewRows is how many machines the overview renders at most.
const OverviewRows = 500

func ago(t time.Time, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// auditOf is the dashboard's audit log of one target ("machine/m1").
func auditOf(target string) templ.SafeURL {
	return templ.SafeURL("/audit?target=" + url.QueryEscape(target))
}

// auditPageSize is how many events the dashboard's audit page shows.
const auditPageSize = 200

// forTarget ends "No events" with the target asked for, if any, and says
// how targets are written when it lacks its kind.
func forTarget(target string) string {
	switch {
	case target == "":
		return ""
	case !strings.Contains(target, "/"):
		return " of " + target + " (a target is KIND/NAME: machine/" + target + ", module/" + target + ")"
	}
	return " of " + target
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// row computes a machine's badge from its records; sent is what was sent
// of its current generation (nil: nothing).
func row(rules models.StateRules, m *models.Machine, seen *time.Time, sent *models.PendingSend, now time.Time) MachineRow {
	r := MachineRow{Name: m.Name, Generation: m.Generation, Applied: m.AppliedGeneration, HostVersion: m.HostVersion,
		Target: m.TargetHostVersion, LastSeen: "never"}
	if seen != nil {
		r.LastSeen = ago(*seen, now)
	} else {
		r.LastSeen = "never (enrolled " + ago(m.CreatedAt, now) + ")"
	}
	r.State = rules.State(m, seen, now)
	// When its last outcome was reported: the states below speak of that
	// outcome, and a later report of another kind (a check, a renewal)
	// does not move it.
	reported := "no report yet"
	if at := m.LastOutcomeAt; at != nil {
		reported = stamp(*at) + " (" + ago(*at, now) + ")"
	} else if m.LastReportAt != nil {
		reported = stamp(*m.LastReportAt)
	}
	switch r.State {
	case models.StateCurrent:
		r.Badge = fmt.Sprintf("current at generation %d", m.Generation)
		r.Since = "applied, reported " + reported
		switch m.Health {
		case models.HealthFailing:
			r.Badge += " — check " + m.HealthCheck + " failing, within the grace"
		case models.HealthPassing:
			if m.HealthAt != nil {
				// The host checks every --check-every and reports a change at
				// once: this is when it last said, not when it last looked.
				r.Since += "; checks passing as of its report " + ago(*m.HealthAt, now) + " (a change is reported at once)"
			}
		default:
			r.Badge += " — no checks declared"
		}
	case models.StateUnhealthy:
		r.Badge = "unhealthy: check " + m.HealthCheck + ": " + m.HealthDetail
		if m.HealthSince != nil {
			r.Since = "failing since " + stamp(*m.HealthSince) + " (" + ago(*m.HealthSince, now) + ")"
		}
		if m.HealthAt != nil {
			// When the host last said so: it reports a change at once, so
			// an older report means it has said nothing different since.
			r.Since += "; as of its report " + ago(*m.HealthAt, now) + " (a change is reported at once)"
		}
	case models.StateBehind:
		r.Badge = fmt.Sprintf("behind by %d generation(s)", m.Generation-m.FinishedGen)
		r.Since = "since " + stamp(m.GenerationAt) + " (" + ago(m.GenerationAt, now) + ", " + m.GenerationTrigger + "); "
		// Why: it cannot be composed, or it was sent and the host has not
		// reported, or the host has not polled for it yet.
		switch {
		case m.HeldBack != "":
			// Composed and sent, but from held-back content: the host
			// decodes no schema that expresses what is declared.
			r.Badge = "behind: " + m.HeldBack
			r.Since += "it keeps receiving what its host can decode until a host rollout upgrades it"
		case m.ComposeErrorGen == m.Generation && m.ComposeError != "":
			r.Badge = fmt.Sprintf("behind: generation %d cannot be composed: %s", m.Generation, m.ComposeError)
			r.Since += "nothing is sent until that is fixed"
		case sent != nil && sent.N > 0:
			r.Since += fmt.Sprintf("sent %s by %s, no report yet", ago(sent.At, now), sent.Instance)
			if sent.N > 1 {
				r.Since += fmt.Sprintf(" (%d sends)", sent.N)
			}
		case !models.Polled(seen, m.CreatedAt):
			// Seen at its enrolment only: that was no poll.
			r.Since += "not sent yet: enrolled " + ago(m.CreatedAt, now) + ", never polled"
		default:
			r.Since += "not sent yet: the host last polled " + r.LastSeen
		}
	case models.StateRefused:
		r.Badge = "refused: " + m.LastReason
		r.Since = "reported " + reported
	case models.StateFailed:
		r.Badge = "failed: " + m.LastReason
		r.Since = "reported " + reported
	case models.StateRejected:
		r.Badge = "rejected: " + m.LastReason
		r.Since = "reported " + reported
	case models.StateConflict:
		r.Badge = "conflict: " + models.ConflictWhy(m.ConflictHostGen, m.Generation)
		r.Since = "nothing is sent until an admin resolves it"
	case models.StateRevoked:
		r.Badge = "revoked: " + m.RevokedReason
		r.Since = "its token and certificates are refused; delete it and enrol the machine again"
	case models.StateOffline:
		r.Badge = "offline"
		r.Since = "last seen " + r.LastSeen
		if !models.Polled(seen, m.CreatedAt) {
			r.Since = "enrolled " + ago(m.CreatedAt, now) + ", never polled"
		}
	case models.StateUpgrading:
		r.Badge = fmt.Sprintf("upgrading: host %s, target %s", m.HostVersion, m.TargetHostVersion)
		if m.ComposeErrorGen == m.Generation && m.ComposeError != "" {
			// Its upgrade is the headline; that nothing can be sent to it
			// meanwhile is not left to its JSON.
			r.Badge += fmt.Sprintf("; generation %d cannot be composed: %s", m.Generation, m.ComposeError)
		}
		if models.RefusedTarget(m.TargetHostVersion, m.LastOutcome, m.LastReason) {
			r.Badge += "; its host refused it: " + m.LastReason
		}
		r.Since = "since " + stamp(m.GenerationAt) + " (" + ago(m.GenerationAt, now) + ")"
	case models.StateRolledBack:
		r.Badge = "rolled back: " + m.LastReason
		r.Since = "reported " + reported
	}
	return r
}

// ModuleChoice is one module on a machine's assignment form.
type ModuleChoice struct {
	Name string
	// Selected says a selector gives it (and a plan rollback's pin on
	// it): not a person's assignment, which the form edits.
	Selected string
	Assigned bool
	Build    string
	Reason   string
	Builds   []int64
	Current  string
}

// DiffRow is what apply-in-full will do to one resource.
type DiffRow struct {
	Resource string
	Change   string // create, change, remove
	Detail   string
}

// ReportLine is a report under its send: the host's journal in words.
type ReportLine struct {
	Time    string
	Outcome string
	Reason  string
	Actions []string
	Checks  []string
}

// SendRow is one send with its outcome and reports.
type SendRow struct {
	ID         string
	Time       string
	Generation int64
	Instance   string
	Trigger    string
	Outcome    string
	Reason     string
	Reports    []ReportLine
}

// MachineDetail is the machine page's data.
type MachineDetail struct {
	Row        MachineRow
	Generation int64
	Modules    []ModuleChoice
	Vars       string
	Notice     string // a plain message: a conflict, a refusal
	Saved      string
	Diff       []DiffRow
	Decl       string
	DeclErr    string
	Sends      []SendRow
	Logs       []LogBlock
	// Running is what the host reports running, yanked builds marked;
	// Labels its labels, "k=v, …".
	Running []RunningRow
	Labels  string
}

// ModuleView is a module with its builds.
type ModuleView struct {
	Name    string
	Kind    string
	Current string
	Builds  []BuildRow
}

// BuildRow is one build.
type BuildRow struct {
	Number    int64
	Version   string
	Commit    string
	Digest    string
	CreatedBy string
	CreatedAt string
	Current   bool
}

// ReleaseRow is a host release with its latest rollout.
type ReleaseRow struct {
	models.Release
	Rollout *RolloutRow
}

// RolloutRow is a rollout's progress, machine by machine.
type RolloutRow struct {
	State    string
	Reason   string
	Machines []models.RolloutMachine
}

func releaseBadge(state string) string {
	if state == models.ReleaseFailed {
		return "failed"
	}
	return "current"
}

// targetBefore is the host release a machine of a rollout was to run
// before it, which it gets back if the rollout fails: with none (no
// target, no fleet default) its host ran the build it was installed with.
func targetBefore(prev string) string {
	if prev == "" {
		return "none (its installed build)"
	}
	return prev
}

func orNone(s string) string {
	if s == "" {
		return "none yet"
	}
	return s
}
