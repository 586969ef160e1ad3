package models

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The bounds of a service's output as it rides a report. A host ships at
// most MaxLogLines lines, MaxLogBytes bytes in all, of one service, and
// of at most MaxLogServices services in one report, so a report with logs
// stays far below the report's body cap (1 MiB) whatever a service
// printed.
const (
	MaxLogLines    = 100
	MaxLogBytes    = 16 << 10
	MaxLogServices = 16
	// MaxLogResources bounds the services whose latest lines are kept
	// for one machine (those shipped most recently): 1 MiB at most.
	MaxLogResources = 64
)

// Why a host ships a service's last lines.
const (
	LogFailed    = "failed"    // the apply of the service failed
	LogRestarted = "restarted" // it exited and its supervisor started it again
	LogUnhealthy = "unhealthy" // its check failed
)

// ServiceLog is the last lines of one service's output, as a host ships
// them in a report.
type ServiceLog struct {
	Resource string `json:"resource"`
	Why      string `json:"why"`
	// Lines are oldest first, without their newlines.
	Lines []string `json:"lines"`
	// Truncated says older output was left out (more than the bounds).
	Truncated bool `json:"truncated,omitempty"`
}

// ServiceLogRow is the latest lines a machine's host shipped of one
// resource, as stored: one row per (machine, resource), overwritten by
// the next shipment (the report that carried it keeps its own copy).
type ServiceLogRow struct {
	MachineID  int64  `gorm:"primaryKey"`
	Resource   string `gorm:"primaryKey"`
	Why        string
	Lines      string // joined by "\n" (a line never holds one)
	Truncated  bool
	ReportID   int64
	Send       string
	Generation int64
	ShippedAt  time.Time // when the controller received the report
}

// TableName keeps the table's plain name.
func (ServiceLogRow) TableName() string { return "service_logs" }

// ServiceLogView is a resource's latest shipped lines as the API and the
// dashboard show them.
type ServiceLogView struct {
	Resource   string    `json:"resource"`
	Why        string    `json:"why"`
	Lines      []string  `json:"lines"`
	Truncated  bool      `json:"truncated"`
	Send       string    `json:"send"`
	Generation int64     `json:"generation"`
	ReportID   int64     `json:"report"`
	ShippedAt  time.Time `json:"shipped_at"`
}

// View is the row as shown, its lines cut to the last tail (0: all).
func (r *ServiceLogRow) View(tail int) ServiceLogView {
	var lines []string
	if r.Lines != "" {
		lines = strings.Split(r.Lines, "\n")
	}
	lines, cut := TailLines(lines, tail)
	return ServiceLogView{Resource: r.Resource, Why: r.Why, Lines: lines, Truncated: r.Truncated || cut,
		Send: r.Send, Generation: r.Generation, ReportID: r.ReportID, ShippedAt: r.ShippedAt}
}

// TailLines is the last n of lines (all of them when n <= 0), and whether
// any were left out.
func TailLines(lines []string, n int) ([]string, bool) {
	if n <= 0 || len(lines) <= n {
		return lines, false
	}
	return lines[len(lines)-n:], true
}

// ParseTail reads the tail a person asked for: 1..MaxLogLines, the
// default (empty) being all a host ships.
func ParseTail(s string) (int, error) {
	if s == "" {
		return MaxLogLines, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLogLines {
		return 0, Invalid("tail", fmt.Sprintf("a number of lines from 1 to %d (a host ships at most %d), not %q", MaxLogLines, MaxLogLines, s))
	}
	return n, nil
}

// ValidateLogs says why the logs of a report are out of bounds, or nil.
// They come from a host, so they are hostile input: a resource is named
// like a declared one (module.name) and only once, the reason is one of
// the words above, and the lines hold no newline or control character (a
// terminal showing them must not be driven by them; a host escapes them)
// and stay within the bounds.
func ValidateLogs(ls []ServiceLog) error {
	if len(ls) > MaxLogServices {
		return Invalid("logs", fmt.Sprintf("at most %d services in one report, not %d", MaxLogServices, len(ls)))
	}
	seen := map[string]bool{}
	for i, l := range ls {
		f := fmt.Sprintf("logs[%d]", i)
		if err := ValidResourceID(l.Resource); err != nil {
			return Invalid(f+".resource", err.Error())
		}
		if seen[l.Resource] {
			return Invalid(f+".resource", l.Resource+" named twice")
		}
		seen[l.Resource] = true
		switch l.Why {
		case LogFailed, LogRestarted, LogUnhealthy:
		default:
			return Invalid(f+".why", "one of failed, restarted, unhealthy")
		}
		if len(l.Lines) > MaxLogLines {
			return Invalid(f+".lines", fmt.Sprintf("at most %d lines, not %d", MaxLogLines, len(l.Lines)))
		}
		size := 0
		for j, line := range l.Lines {
			size += len(line) + 1
			if size > MaxLogBytes {
				return Invalid(f+".lines", fmt.Sprintf("at most %d bytes in all", MaxLogBytes))
			}
			if k := strings.IndexFunc(line, notShown); k >= 0 || !utf8.ValidString(line) {
				return Invalid(fmt.Sprintf("%s.lines[%d]", f, j), "a control character or invalid UTF-8 (a host escapes them)")
			}
		}
	}
	return nil
}

// notShown is a character a log line may not carry as is: a control
// character other than a tab (a newline, a terminal escape, or NUL, which
// PostgreSQL's TEXT refuses).
func notShown(r rune) bool { return r != '\t' && unicode.IsControl(r) }

// hidden is a character words from outside are not shown with as they
// are: notShown, and the format characters (Unicode's Cf: the
// bidirectional controls, which reorder what follows them — a host
// version "\u202e0.3.1" was shown as "1.3.0" while compared as sent — and
// the zero-width ones, which show nothing — a host version "1.6.0\u200b"
// was shown as another machine's 1.6.0 while compared as another).
func hidden(r rune) bool { return notShown(r) || unicode.Is(unicode.Cf, r) }

// EscapeLogLine makes one line of a service's output showable: invalid
// UTF-8 and control characters (but tabs) become \xNN escapes, the
// bidirectional controls \uNNNN ones (hidden), and the
// line is cut to max bytes (marked with "…"), on a character boundary.
func EscapeLogLine(s string, limit int) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case hidden(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
		if b.Len() > limit {
			break
		}
	}
	return Clip(b.String(), limit)
}

// Clip cuts s to at most limit bytes, on a character boundary, marking
// the cut with "…".
func Clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const mark = "…"
	cut := limit - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + mark
}

// ValidResourceID says why id is not a declared resource's id
// (module.name, each a name), or nil.
func ValidResourceID(id string) error {
	mod, name, ok := strings.Cut(id, ".")
	if !ok || ValidName("module", mod) != nil || ValidName("name", name) != nil {
		return fmt.Errorf("%q is not a resource id (module.name)", Clip(id, 130))
	}
	return nil
}

// NotText says why s is not text a store takes alike on both dialects (a
// NUL, bytes that are not UTF-8), or "" when it is.
func NotText(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "may not contain a NUL character"
	}
	return ""
}
