package models

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// CheckReportSend says whether a report may name send: the send must be
// this machine's and carry the report's generation. A send of another
// machine is forbidden; a wrong generation is a conflict, and changes
// nothing.
func CheckReportSend(machineID int64, r *Report, send *Send) error {
	if send.MachineID != machineID {
		return fmt.Errorf("%w: send %s was not to this machine", ErrForbidden, r.Send)
	}
	if send.Generation != r.Generation {
		return fmt.Errorf("%w: send %s carried generation %d, not %d", ErrConflict, r.Send, send.Generation, r.Generation)
	}
	return nil
}

// ReportUpdates is what a report changes on its machine's summary, as
// column → value. tied says the report names a send of this machine and
// its generation (CheckReportSend passed).
//
// Only a report tied to a send on record moves the applied or finished
// generation, so only such a report can make a machine current. A report
// naming no send (a host refusing a release, or rolled back after a
// failed trial, before it has applied anything) is kept as a row, and may
// only make the machine look worse (rolled_back, refused), never better.
func ReportUpdates(m *Machine, r *Report, tied bool, now time.Time) map[string]any {
	up := map[string]any{}
	// The host's and its launcher's versions are taken from a report of
	// the latest generation or a host upgrade's: an older report replayed
	// from an outbox after an upgrade says the versions before it (and a
	// host version put back would be a change at the host's next poll,
	// counted against its limit). The launcher's is said with every
	// report of a host that says its version (none: a host run without a
	// launcher, or of a release before launchers said theirs).
	if r.HostVersion != "" && (r.Generation >= m.FinishedGen || r.Outcome == OutcomeUpgraded || r.Outcome == OutcomeRolledBack) {
		up["host_version"] = r.HostVersion
		up["launcher_version"] = r.LauncherVersion
	}
	if !tied {
		if r.Outcome == OutcomeRolledBack || r.Outcome == OutcomeRefused {
			outcome(up, r, now)
		}
		return up
	}
	if r.Outcome == OutcomeChecked {
		// Checks between applies: health only, and only of what the
		// machine applied.
		if r.Generation == m.AppliedGeneration {
			health(up, m, r.Checks, now)
		}
		return up
	}
	if r.Outcome == OutcomeRenewed {
		// A renewal is on the record (the report row, the journal); the
		// machine is still what its applied generation made it.
		return up
	}
	if r.Late {
		return up
	}
	// The summary speaks of the latest generation only: a refusal of a
	// stale replay is kept as a report row, but the machine is still what
	// its latest generation made it.
	if r.Generation >= m.FinishedGen && r.Generation > 0 {
		outcome(up, r, now)
	}
	if FinalOutcome(r.Outcome) && r.Generation >= m.FinishedGen {
		up["finished_generation"] = r.Generation
	}
	if r.Outcome == OutcomeApplied && r.Generation >= m.AppliedGeneration {
		health(up, m, r.Checks, now)
		up["applied_generation"] = r.Generation
		// Every host release sends what it runs with each apply's report,
		// and leaves it out when that is nothing (omitempty): a machine
		// whose last module was taken away runs nothing, not what it ran
		// before.
		running := "{}"
		if len(r.Running) > 0 {
			b, _ := json.Marshal(r.Running)
			running = string(b)
		}
		up["running"] = running
	}
	return up
}

// outcome sets the machine's last outcome to r's, with when and of which
// generation: what the states that speak of it say since when from.
func outcome(up map[string]any, r *Report, now time.Time) {
	up["last_outcome"], up["last_reason"] = r.Outcome, r.Reason
	up["last_outcome_at"], up["last_outcome_generation"], up["last_outcome_send"] = now, r.Generation, r.Send
}

// DecodeReport reads a host's report. It is read leniently (unknown
// fields from a newer host are kept in the row's body), but the outcome
// must be known, the generation given, and the services' logs within
// their bounds.
func DecodeReport(body []byte) (*Report, error) {
	// Go reads bytes that are not UTF-8 as U+FFFD, but the body is kept
	// as sent, which PostgreSQL cannot store and SQLite would: refused
	// alike on both (a host's encoder never writes such bytes).
	if !utf8.Valid(body) {
		return nil, Invalid("body", "not valid UTF-8")
	}
	var r Report
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, Invalid("body", "not a report: "+err.Error())
	}
	var present struct {
		Generation *json.RawMessage `json:"generation"`
	}
	_ = json.Unmarshal(body, &present)
	switch {
	case !ValidOutcome(r.Outcome):
		return nil, Invalid("outcome", "one of applied, refused, failed, rejected, upgraded, rolled_back, checked, renewed")
	case present.Generation == nil || string(*present.Generation) == "null":
		return nil, Invalid("generation", "required: the generation the report is about (0 before any)")
	case r.Generation < 0:
		return nil, Invalid("generation", "must not be negative")
	}
	// What a host says it runs is what a release may be called: kept on
	// the machine and shown on every page and terminal that shows it.
	for _, v := range []struct{ field, value string }{{"host_version", r.HostVersion}, {"launcher_version", r.LauncherVersion}} {
		if err := ValidVersion(v.field, v.value, false); err != nil {
			return nil, err
		}
	}
	if err := ValidateLogs(r.Logs); err != nil {
		return nil, err
	}
	// A host escapes its lines (EscapeLogLine); what it did not escape,
	// a host of a release before a character was counted hidden, or one
	// that does not escape at all, is escaped here, where the lines are
	// kept and then shown, rather than refused: a refused report is
	// dropped from the host's outbox for good.
	for i := range r.Logs {
		l := &r.Logs[i]
		size := 0
		for j, line := range l.Lines {
			if strings.ContainsFunc(line, hidden) {
				// Clipped to fit the bound with its newline: clipped to
				// it whole, the newest line never fit and went, and
				// every line before it.
				l.Lines[j] = EscapeLogLine(line, MaxLogBytes-1)
			}
			size += len(l.Lines[j]) + 1
		}
		// The bound holds of what is kept: an escape makes a 2-byte
		// character six ("\u0600"), and a host's 16 KiB of them was kept
		// and shown as 48. The oldest lines go, marked so.
		for size > MaxLogBytes && len(l.Lines) > 0 {
			size -= len(l.Lines[0]) + 1
			l.Lines, l.Truncated = l.Lines[1:], true
		}
	}
	// What it runs is kept on the machine and shown in every list of
	// machines: only modules' names, and at most MaxRunning of them (the
	// first by name). The rest of the report is kept whole: refused, a
	// host's report would be dropped from its outbox for good.
	if len(r.Running) > 0 {
		names := make([]string, 0, len(r.Running))
		for mod := range r.Running {
			if ValidName("running", mod) == nil {
				names = append(names, mod)
			}
		}
		if len(names) != len(r.Running) || len(names) > MaxRunning {
			slices.Sort(names)
			kept := make(map[string]RunningBuild, min(len(names), MaxRunning))
			for _, mod := range names[:min(len(names), MaxRunning)] {
				kept[mod] = r.Running[mod]
			}
			r.Running = kept
		}
		// A digest that is not one is not kept (a megabyte of one made
		// every list of machines a megabyte): the build is.
		for mod, rb := range r.Running {
			if rb.Digest != "" && !ValidDigest(rb.Digest) || rb.Build < 0 {
				r.Running[mod] = RunningBuild{Build: max(rb.Build, 0)}
			}
		}
	}
	// A host's words, clipped and with control characters escaped once,
	// here, before anything keeps them: the report's row (its body aside),
	// its machine's summary, a rollout's and a release's failure, all
	// shown on every page and terminal that shows them.
	r.Reason = EscapeLogLine(r.Reason, MaxReasonBytes)
	for i := range r.Checks {
		r.Checks[i].Resource = EscapeLogLine(r.Checks[i].Resource, MaxReasonBytes)
		r.Checks[i].Detail = EscapeLogLine(r.Checks[i].Detail, MaxReasonBytes)
	}
	return &r, nil
}

// MaxReasonBytes bounds what is kept of a host's words (a reason, a
// check's name and detail), control characters escaped (DecodeReport):
// the overview shows them for every machine, every refresh (a host's
// megabyte reason was a megabyte on every row's page). The report's body
// keeps what it said.
const MaxReasonBytes = 4 << 10

// MaxRunning bounds the modules a report says its host runs: every list
// of machines carries them (a report naming 9,000 made each page of
// machines a megabyte).
const MaxRunning = 1024

// health sets the health columns from checks.
func health(up map[string]any, m *Machine, checks []CheckResult, now time.Time) {
	h, check, detail, since, failing := HealthOf(m, checks, now)
	up["health"], up["health_check"], up["health_detail"], up["health_since"], up["health_at"] = h, check, detail, since, now
	up["health_failing"] = failing
}
