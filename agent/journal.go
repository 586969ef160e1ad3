package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"mesh/models"
)

// Entry is one line of the journal: one apply, refusal or upgrade.
type Entry struct {
	Time       time.Time            `json:"time"`
	Send       string               `json:"send"`
	Generation int64                `json:"generation"`
	Digest     string               `json:"digest"`
	Outcome    string               `json:"outcome"`
	Reason     string               `json:"reason"`
	Attempt    int                  `json:"attempt,omitempty"`
	Actions    []models.Action      `json:"actions"`
	Checks     []models.CheckResult `json:"checks,omitempty"`
	// ReportRefused is set on the entry of a report the controller refused
	// (a 4xx but 401, 408, 429): moved here from the outbox, never sent
	// again. The entry is the report as it was queued.
	ReportRefused *ReportRefusal `json:"report_refused,omitempty"`
}

// ReportRefusal is the controller's answer to a report it refused.
type ReportRefusal struct {
	Status int    `json:"status"` // the HTTP status
	Detail string `json:"detail"` // the problem's detail
}

func journalPath(dir string) string { return filepath.Join(dir, "journal.jsonl") }

// appendJournal appends one entry and syncs it: the journal is what settles
// "which image did that declaration name?", so it must survive a crash. A
// journal whose last line was torn (a power loss mid-append leaves no
// newline) is given one first, so the entry starts a line of its own and
// only the torn line is lost.
func appendJournal(dir string, e Entry) error {
	if e.Actions == nil {
		e.Actions = []models.Action{}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(journalPath(dir), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	line := append(b, '\n')
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	if _, err := f.Write(line); err != nil {
		return err
	}
	return f.Sync()
}

// JournalDamage says which lines of the journal could not be read: a line
// torn by a power loss mid-append, or one damaged otherwise. ReadJournal
// skips them and returns it with every entry it could read.
type JournalDamage struct {
	Lines []int // 1-based
}

func (d *JournalDamage) Error() string {
	return fmt.Sprintf("%d journal line(s) could not be read and were skipped (a line torn by a crash mid-append, or damaged): line(s) %s",
		len(d.Lines), strings.Trim(fmt.Sprint(d.Lines), "[]"))
}

// ReadJournal reads every entry. Lines that do not parse are skipped, not
// the end of the journal: the entries before and after them are returned,
// with a *JournalDamage naming them. Empty lines are nothing.
func ReadJournal(dir string) ([]Entry, error) {
	f, err := os.Open(journalPath(dir))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var es []Entry
	var damage JournalDamage
	r := bufio.NewReaderSize(f, 1<<20)
	for n := 1; ; n++ {
		line, err := readJournalLine(r, maxJournalLine)
		if errors.Is(err, errLineTooLong) {
			// A damaged stretch (zeros after a crash) past any entry's
			// length: skipped like any line that does not parse, where
			// it ended the read and every entry after, and before, it
			// went unprinted.
			damage.Lines = append(damage.Lines, n)
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return es, err
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var e Entry
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				damage.Lines = append(damage.Lines, n)
			} else {
				es = append(es, e)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if len(damage.Lines) > 0 {
		return es, &damage
	}
	return es, nil
}

// maxJournalLine is the longest journal line read; a longer one is
// damage (an entry is kilobytes: its actions and reason, bounded).
const maxJournalLine = 64 << 20

var errLineTooLong = errors.New("journal line too long")

// readJournalLine reads one line (its newline dropped), or skips to the end
// of one longer than max, saying so (errLineTooLong); io.EOF with the last
// line when it has no newline.
func readJournalLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	long := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !long {
			if len(line)+len(chunk) > max+1 {
				long, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && !errors.Is(err, io.EOF):
			return nil, err
		}
		if long {
			return nil, errLineTooLong // at the end of the file, the next read says io.EOF
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}

// PrintJournal writes the journal for a person, or as JSON lines. Lines
// that could not be read are skipped: in words, a last line says which;
// as JSON (where every line is an entry) the error says it, after every
// entry is written.
func PrintJournal(dir string, w io.Writer, asJSON bool) error {
	es, err := ReadJournal(dir)
	var damage *JournalDamage
	if err != nil && !errors.As(err, &damage) {
		return err
	}
	if len(es) == 0 && damage == nil {
		// Nothing printed would read as a host that did nothing, whether
		// or not the directory is a host's.
		if _, err := os.Stat(identityPath(dir)); err != nil {
			return fmt.Errorf("%s has no host.json: no host's state directory (give --state, or run `mesh-host enroll` first)", dir)
		}
		if !asJSON {
			fmt.Fprintln(w, "no entries yet: this host has applied, refused and rejected nothing")
		}
		return nil
	}
	for _, e := range es {
		if asJSON {
			b, _ := json.Marshal(e)
			fmt.Fprintln(w, string(b))
			continue
		}
		fmt.Fprintln(w, e.String())
	}
	if damage != nil {
		if asJSON {
			return damage
		}
		fmt.Fprintln(w, damage.Error())
	}
	return nil
}

// String is the entry in words a person reads.
func (e Entry) String() string {
	var b strings.Builder
	send := e.Send
	if send == "" {
		send = "-"
	}
	// A check's or a renewal's entry names no declaration of its own.
	digest := ""
	if e.Digest != "" {
		digest = ", " + short(e.Digest)
	}
	fmt.Fprintf(&b, "%s  generation %d  %s  (send %s%s)", e.Time.Local().Format("2006-01-02 15:04:05 MST"), e.Generation, e.Outcome, send, digest)
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", e.Reason)
	}
	for _, a := range e.Actions {
		if a.Action == "unchanged" {
			continue
		}
		fmt.Fprintf(&b, "\n    %s", a.Words())
	}
	n := 0
	for _, a := range e.Actions {
		if a.Action == "unchanged" {
			n++
		}
	}
	if n > 0 {
		fmt.Fprintf(&b, "\n    %d resource(s) unchanged", n)
	}
	for _, c := range e.Checks {
		state := "healthy"
		if !c.OK {
			state = "unhealthy"
		}
		fmt.Fprintf(&b, "\n    check %s: %s (%s)", c.Resource, state, c.Detail)
	}
	if rr := e.ReportRefused; rr != nil {
		fmt.Fprintf(&b, "\n    report refused by the controller (%d): %s; not sent again", rr.Status, rr.Detail)
	}
	return b.String()
}

func short(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
