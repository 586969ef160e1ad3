package web

import (
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
	Launcher    string // the launcher running the host ("" without one)
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

func ago(t time.Time, now time.Time) string { return models.Ago(t, now) }

// auditOf is the dashboard's audit log of one target ("machine/m1").
func auditOf(target string) templ.SafeURL {
	return templ.SafeURL("/audit?target=" + url.QueryEscape(target))
}

// machinesFragment is where the overview's table refreshes from: the same
// filter and search the page was rendered for, escaped (a search of "#"
// or "%" pasted in asked for the whole fleet).
func machinesFragment(state, q string) string {
	return "/ui/machines?" + url.Values{"state": {state}, "q": {q}}.Encode()
}

// rolloutOf is the dashboard's page of a host release's rollout. A version
// may hold any printable character ("1.6.0#rc"): pasted into the path, the
// link and the page's refresh asked for another release.
func rolloutOf(version string) string {
	return "/releases/" + url.PathEscape(version) + "/rollout"
}

// auditPageSize is how many events the dashboard's audit page shows.
const auditPageSize = 200

// forTarget ends "No events" with the target asked for, if any, and says
// how targets are written when it lacks its kind.
func forTarget(target string) string {
	kind, name, kinded := strings.Cut(target, "/")
	if !kinded {
		name = kind
	}
	switch {
	case target == "":
		return ""
	case models.ValidName("", name) != nil || kinded && models.ValidName("", kind) != nil:
		// Not a name mesh gives: words from a link, not shown.
		return " of that target (a target is KIND/NAME, as the log's rows name them: machine/m1, module/web)"
	case !kinded:
		return " of " + target + " (a target is KIND/NAME: machine/" + target + ", module/" + target + ")"
	}
	return " of " + target
}

// auditHeading is the audit page's heading for one target: the target
// named only when the log holds events of it (mesh wrote it) — a link's
// ?target= was printed as it came, the heading of a page on the
// dashboard's own origin saying whatever an outsider's link said.
func auditHeading(target string, found bool) string {
	if found {
		return "Audit log of " + target
	}
	return "Audit log" + forTarget(target)
}

func stamp(t time.Time) string { return models.Stamp(t) }

// row computes a machine's badge from its records; sent is what was sent
// of its current generation (nil: nothing).
func row(rules models.StateRules, m *models.Machine, seen *time.Time, sent *models.PendingSend, now time.Time) MachineRow {
	r := MachineRow{Name: m.Name, Generation: m.Generation, Applied: m.AppliedGeneration, HostVersion: m.HostVersion, Launcher: m.LauncherVersion,
		Target: m.TargetHostVersion, LastSeen: models.LastSeenWords(m, seen, now)}
	r.State = rules.State(m, seen, now)
	w := models.SayState(r.State, m, seen, sent, now)
	r.Badge, r.Since = w.Badge, w.Since
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
	// ID is the report's: its element keeps it across the page's live
	// refresh (a report, once stored, never changes).
	ID      int64
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
	// Upgrade says the machine's newest host upgrade ("" for none): how
	// it ended, when, and why.
	Upgrade string
}

// ModuleView is a module with its builds.
type ModuleView struct {
	Name    string
	Kind    string
	Current string
	// CurrentReason: why a person went back to the current build, from
	// builds up to BackFrom.
	CurrentReason string
	BackFrom      int64
	Builds        []BuildRow
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
	// Older: older than the current build (making it current is going
	// back, which asks for a reason).
	Older bool
	// Typed is the reason a person typed for it, kept when the act was
	// refused.
	Typed string
	// State is the build's (ready, yanked, queued…); Unusable says why it
	// cannot become current (yanked, not finished), empty when it can.
	State, Unusable string
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
	Made     string // who made it when, and when it ended
	Machines []RolloutMachineRow
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
