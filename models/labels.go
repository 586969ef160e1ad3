package models

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// MachineLabel is one label of a machine (key=value). Labels are set by an
// operator, or at enrolment from the join token; a host never sets its own,
// so it can never give itself a module.
type MachineLabel struct {
	MachineID int64  `gorm:"primaryKey"`
	Key       string `gorm:"primaryKey"`
	Value     string
}

// Label keys and values: short, and safe in a selector (no ',', '=', '!').
var (
	labelKeyRE   = regexp.MustCompile(`^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
)

// MaxLabels bounds a machine's labels.
const MaxLabels = 64

// ValidLabels says why labels are not valid, naming the first bad one
// (field is where they came from, such as "labels").
func ValidLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Invalid(field, fmt.Sprintf("at most %d labels", MaxLabels))
	}
	for _, k := range SortedLabelKeys(labels) {
		if !labelKeyRE.MatchString(k) {
			return Invalid(field+"."+k, "a label key is 1-63 characters of a-z, 0-9, '.', '_', '/' or '-', starting and ending with a letter or digit")
		}
		if !labelValueRE.MatchString(labels[k]) {
			return Invalid(field+"."+k, fmt.Sprintf("value %q: a label value is 1-63 characters of A-Z, a-z, 0-9, '.', '_' or '-', starting and ending with a letter or digit", labels[k]))
		}
	}
	return nil
}

// SortedLabelKeys are the keys of labels in order.
func SortedLabelKeys(labels map[string]string) []string {
	ks := make([]string, 0, len(labels))
	for k := range labels {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ParseLabelsJSON reads labels kept as a JSON object (a join token's); an
// empty string is no labels.
func ParseLabelsJSON(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	return out, nil
}

// Selector operators.
const (
	OpEquals    = "="
	OpNotEquals = "!="
	OpExists    = "exists"
	OpNotExists = "!exists"
)

// Requirement is one term of a selector.
type Requirement struct {
	Key, Op, Value string
}

// Selector is a conjunction of requirements: a machine matches when every
// one holds. The empty selector matches no machine (the module goes only
// where it is assigned).
type Selector []Requirement

// ParseSelector reads a selector: requirements separated by commas, each
// `key=value`, `key!=value`, `key` (the label is set) or `!key` (it is not).
// `key!=value` holds for a machine without the label too. Spaces around
// terms are ignored. The error names the term and what is wrong with it.
func ParseSelector(s string) (Selector, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var sel Selector
	for i, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		bad := func(why string) error {
			return Invalid("selector", fmt.Sprintf("term %d (%q): %s", i+1, term, why))
		}
		if term == "" {
			return nil, bad("empty; terms are separated by single commas")
		}
		var r Requirement
		switch {
		case strings.Contains(term, "!="):
			k, v, _ := strings.Cut(term, "!=")
			r = Requirement{Key: strings.TrimSpace(k), Op: OpNotEquals, Value: strings.TrimSpace(v)}
		case strings.Contains(term, "="):
			k, v, _ := strings.Cut(term, "=")
			r = Requirement{Key: strings.TrimSpace(k), Op: OpEquals, Value: strings.TrimSpace(v)}
		case strings.HasPrefix(term, "!"):
			r = Requirement{Key: strings.TrimSpace(term[1:]), Op: OpNotExists}
		default:
			r = Requirement{Key: term, Op: OpExists}
		}
		if r.Key == "" {
			return nil, bad("no label key before the operator")
		}
		if !labelKeyRE.MatchString(r.Key) {
			return nil, bad(fmt.Sprintf("key %q is not a label key (1-63 characters of a-z, 0-9, '.', '_', '/' or '-')", r.Key))
		}
		if r.Op == OpEquals || r.Op == OpNotEquals {
			if r.Value == "" {
				return nil, bad("no value after " + r.Op + "; to select machines without the label write !" + r.Key)
			}
			if strings.ContainsAny(r.Value, "=!") {
				return nil, bad(fmt.Sprintf("value %q holds an operator; one operator per term", r.Value))
			}
			if !labelValueRE.MatchString(r.Value) {
				return nil, bad(fmt.Sprintf("value %q is not a label value (1-63 characters of A-Z, a-z, 0-9, '.', '_' or '-')", r.Value))
			}
		}
		sel = append(sel, r)
	}
	return sel, nil
}

// Matches says whether a machine with labels is selected.
func (sel Selector) Matches(labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for _, r := range sel {
		v, ok := labels[r.Key]
		switch r.Op {
		case OpEquals:
			if !ok || v != r.Value {
				return false
			}
		case OpNotEquals:
			if ok && v == r.Value {
				return false
			}
		case OpExists:
			if !ok {
				return false
			}
		case OpNotExists:
			if ok {
				return false
			}
		}
	}
	return true
}

// String writes the selector in its canonical form (the form stored).
func (sel Selector) String() string {
	terms := make([]string, len(sel))
	for i, r := range sel {
		switch r.Op {
		case OpExists:
			terms[i] = r.Key
		case OpNotExists:
			terms[i] = "!" + r.Key
		default:
			terms[i] = r.Key + r.Op + r.Value
		}
	}
	return strings.Join(terms, ",")
}

// SelectionChange is what a label or selector change does to one machine:
// the modules it gains and loses (its generation rises with either).
type SelectionChange struct {
	Machine string   `json:"machine"`
	Gains   []string `json:"gains"`
	Loses   []string `json:"loses"`
}

// SelectedRow is what a machine's assignment row of a module says, for
// Reselect: whether a person assigned it and whether its selector
// matched when last judged.
type SelectedRow struct {
	Assigned, Selected bool
}

// Reselect judges one machine against the selectors of modules (by name):
// for each module, whether it is selected now, and which modules the
// machine gains (no row before, selected now) or loses (only selected
// before, not now). A module a person assigned is neither gained nor lost:
// the assignment holds it.
func Reselect(labels map[string]string, selectors map[string]Selector, rows map[string]SelectedRow) (selected map[string]bool, gains, loses []string) {
	selected = map[string]bool{}
	names := make([]string, 0, len(selectors))
	for n := range selectors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		now := selectors[n].Matches(labels)
		selected[n] = now
		row, had := rows[n]
		switch {
		case now && !had:
			gains = append(gains, n)
		case !now && had && row.Selected && !row.Assigned:
			loses = append(loses, n)
		}
	}
	return selected, gains, loses
}

// LabelChange is what a label write did (or, previewed, would do).
type LabelChange struct {
	Machine *Machine
	// Changes are the modules the machine gains and loses (empty: none;
	// its generation rises all the same, as for variables).
	Changes []SelectionChange
}

// ModuleChange is what a module's update did (or, previewed, would do).
type ModuleChange struct {
	Module *Module
	// Changes are the machines that gain or lose the module by its selector.
	Changes []SelectionChange
}
