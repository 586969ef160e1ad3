package models

import (
	"cmp"
	"fmt"
	"time"
)

// Ago says how long before now t was, as the dashboard, the API's state
// words and meshctl say it.
func Ago(t time.Time, now time.Time) string {
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

// Stamp is a time as the record shows it.
func Stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// LastSeenWords says when a machine's host was last heard from.
func LastSeenWords(m *Machine, seen *time.Time, now time.Time) string {
	if seen != nil {
		return Ago(*seen, now)
	}
	return "never (enrolled " + Ago(m.CreatedAt, now) + ")"
}

// StateWords is a machine's state in words: the headline (the state and
// why) and since when, each said from what was checked.
type StateWords struct {
	Badge string `json:"badge"`
	Since string `json:"since"`
}

// RevokedWhen says when and by whom a machine was revoked.
func RevokedWhen(by string, at, now time.Time) string {
	return "revoked " + Stamp(at) + " (" + Ago(at, now) + ") by " + cmp.Or(by, "someone before this was recorded")
}

// SayState says a machine's state (as StateRules.State judged it) whole:
// the one place its words are made, for the dashboard, the API and so
// meshctl. sent is what was sent of its current generation (nil or zero:
// nothing), which says why a machine is behind.
func SayState(state string, m *Machine, seen *time.Time, sent *PendingSend, now time.Time) StateWords {
	var w StateWords
	lastSeen := LastSeenWords(m, seen, now)
	// When its last outcome was reported: the states below speak of that
	// outcome, and a later report of another kind (a check, a renewal)
	// does not move it.
	reported := "no report yet"
	if at := m.LastOutcomeAt; at != nil {
		reported = Stamp(*at) + " (" + Ago(*at, now) + ")"
	} else if m.LastReportAt != nil {
		reported = Stamp(*m.LastReportAt)
	}
	switch state {
	case StateCurrent:
		w.Badge = fmt.Sprintf("current at generation %d", m.Generation)
		w.Since = "applied, reported " + reported
		switch m.Health {
		case HealthFailing:
			w.Badge += " — check " + m.HealthCheck + " failing, within the grace" + m.alsoFailing()
		case HealthPassing:
			if m.HealthAt != nil {
				// The host checks every --check-every and reports a change at
				// once: this is when it last said, not when it last looked.
				w.Since += "; checks passing as of its report " + Ago(*m.HealthAt, now) + " (a change is reported at once)"
			}
		default:
			w.Badge += " — no checks declared"
		}
	case StateUnhealthy:
		w.Badge = "unhealthy: check " + m.HealthCheck + ": " + m.HealthDetail + m.alsoFailing()
		if m.HealthSince != nil {
			w.Since = "failing since " + Stamp(*m.HealthSince) + " (" + Ago(*m.HealthSince, now) + ")"
		}
		if m.HealthAt != nil {
			// When the host last said so: it reports a change at once, so
			// an older report means it has said nothing different since.
			w.Since += "; as of its report " + Ago(*m.HealthAt, now) + " (a change is reported at once)"
		}
	case StateBehind:
		w.Badge = fmt.Sprintf("behind by %d generation(s)", m.Generation-m.FinishedGen)
		// When its latest generation was made, said as that: the time
		// moves with every generation, so "since" it would say a machine
		// behind for an hour fell behind the moment a variable changed.
		w.Since = fmt.Sprintf("at generation %d, made %s (%s, %s), %d the last it finished; ",
			m.Generation, Stamp(m.GenerationAt), Ago(m.GenerationAt, now), m.GenerationTrigger, m.FinishedGen)
		// Why: it cannot be composed, or it was sent and the host has not
		// reported, or the host has not polled for it yet.
		switch {
		case m.HeldBack != "":
			// Composed and sent, but from held-back content: the host
			// decodes no schema that expresses what is declared.
			w.Badge = "behind: " + m.HeldBack
			w.Since += "it keeps receiving what its host can decode until a host rollout upgrades it"
		case m.ComposeErrorGen == m.Generation && m.ComposeError != "":
			w.Badge = fmt.Sprintf("behind: generation %d cannot be composed: %s", m.Generation, m.ComposeError)
			w.Since += "nothing is sent until that is fixed"
		case sent != nil && sent.N > 0:
			w.Since += fmt.Sprintf("sent %s by %s, no report yet", Ago(sent.At, now), sent.Instance)
			if sent.N > 1 {
				w.Since += fmt.Sprintf(" (%d sends)", sent.N)
			}
		case !Polled(seen, m.CreatedAt):
			// Seen at its enrolment only: that was no poll.
			w.Since += "not sent yet: enrolled " + Ago(m.CreatedAt, now) + ", never polled"
		default:
			w.Since += "not sent yet: the host last polled " + lastSeen
		}
	case StateRefused:
		w.Badge = "refused: " + m.LastReason
		w.Since = "reported " + reported
	case StateFailed:
		w.Badge = "failed: " + m.LastReason
		if m.LastOutcomeGen > 0 {
			w.Badge = fmt.Sprintf("generation %d failed (it applied %d): %s", m.LastOutcomeGen, m.AppliedGeneration, m.LastReason)
		}
		w.Since = "reported " + reported
	case StateRejected:
		w.Badge = "rejected: " + m.LastReason
		w.Since = "reported " + reported
	case StateConflict:
		w.Badge = "conflict: " + ConflictWhy(m.ConflictHostGen, m.Generation)
		// When it was found, and when its host was last heard from: a
		// conflict its host keeps saying is told from one said once by a
		// host gone since.
		w.Since = "its host last seen " + lastSeen + "; nothing is sent until an admin resolves it"
		if m.ConflictAt != nil {
			w.Since = "found " + Stamp(*m.ConflictAt) + " (" + Ago(*m.ConflictAt, now) + "), " + w.Since
		}
	case StateRevoked:
		w.Badge = "revoked: " + m.RevokedReason
		w.Since = "its token and certificates are refused; delete it and enrol the machine again"
		if m.RevokedAt != nil {
			w.Since = RevokedWhen(m.RevokedBy, *m.RevokedAt, now) + "; " + w.Since
		}
	case StateOffline:
		w.Badge = "offline"
		w.Since = "last seen " + lastSeen
		if !Polled(seen, m.CreatedAt) {
			w.Since = "enrolled " + Ago(m.CreatedAt, now) + ", never polled"
		}
		if m.Generation > m.FinishedGen {
			// Offline is the headline; that it is behind too, and since
			// when, is what a person looking for machines behind needs.
			w.Badge = fmt.Sprintf("offline, behind by %d generation(s)", m.Generation-m.FinishedGen)
			w.Since += fmt.Sprintf("; generation %d made %s (%s), %d the last it finished", m.Generation, Ago(m.GenerationAt, now), m.GenerationTrigger, m.FinishedGen)
		}
	case StateUpgrading:
		w.Badge = fmt.Sprintf("upgrading: host %s, target %s", m.HostVersion, m.TargetHostVersion)
		if m.ComposeErrorGen == m.Generation && m.ComposeError != "" {
			// Its upgrade is the headline; that nothing can be sent to it
			// meanwhile is not left to its JSON.
			w.Badge += fmt.Sprintf("; generation %d cannot be composed: %s", m.Generation, m.ComposeError)
		}
		if RefusedTarget(m.TargetHostVersion, m.LastOutcome, m.LastReason) {
			w.Badge += "; its host refused it: " + m.LastReason
		}
		// What was checked is the version its host says with every poll:
		// as of when it last did. (Its latest generation's time is not
		// when the upgrade began: any later change moves it.)
		w.Since = "as its host said at enrolment " + Ago(m.CreatedAt, now)
		if Polled(seen, m.CreatedAt) {
			w.Since = "as its host said " + Stamp(*seen) + " (" + Ago(*seen, now) + ")"
		}
	case StateRolledBack:
		w.Badge = "rolled back: " + m.LastReason
		w.Since = "reported " + reported
	}
	return w
}

// DurationWords says a wait a person reads: to the minute past one, to
// the second below it, never "0s".
func DurationWords(d time.Duration) string {
	if d >= time.Minute {
		return d.Round(time.Minute).String()
	}
	return max(time.Second, d.Round(time.Second)).String()
}
