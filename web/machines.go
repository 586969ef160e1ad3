package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/service"
)

// overviewData counts every machine by state and reads the rows of the
// first OverviewRows that match the filter.
func (s *Server) overviewData(ctx context.Context, state, q string) (Overview, error) {
	// Every machine is counted by state from the few columns a state is
	// judged from; only the first OverviewRows that match are read whole
	// and rendered (a fleet of 100,000 would be a page of tens of
	// megabytes, refreshed every 2 s): the state filter and the search
	// narrow the rest.
	now := time.Now()
	o := Overview{State: state, Q: q, Legend: legend(s.Rules)}
	counts := map[string]int{}
	lq := strings.ToLower(q) // once, not once a machine
	// The counts and the rows are of one snapshot: read apart, a machine
	// that changed between them was counted under one state and shown
	// under another.
	all, ms, sent, err := s.Store.Overview(ctx, func(all []models.Machine) []int64 {
		var shown []int64
		for i := range all {
			st := s.Rules.State(&all[i], s.lastSeen(&all[i]), now)
			counts[st]++
			if state != "" && st != state {
				continue
			}
			if lq != "" && !strings.Contains(all[i].Name, lq) {
				continue
			}
			o.Matching++
			if len(shown) < OverviewRows {
				shown = append(shown, all[i].ID)
			}
		}
		return shown
	})
	if err != nil {
		return Overview{}, err
	}
	o.Total = len(all)
	for i := range ms {
		p := sent[ms[i].ID]
		o.Rows = append(o.Rows, row(s.Rules, &ms[i], s.lastSeen(&ms[i]), &p, now))
	}
	for _, st := range AllStates {
		if counts[st] > 0 {
			o.Counts = append(o.Counts, StateCount{State: st, N: counts[st]})
		}
	}
	return o, nil
}

// legend says what offline and unhealthy mean on this controller (its
// --offline-after and --unhealthy-after).
func legend(r models.StateRules) string {
	return fmt.Sprintf("offline: the host has not polled for %s. unhealthy: a declared check (or the host's own, of its state dir) has failed for %s "+
		"(the grace, so a service still starting is not flagged); within it the machine stays current and says its check is failing.",
		span(r.OfflineAfter), span(r.UnhealthyAfter))
}

// span is a duration in words: "3 minutes", "90 seconds".
func span(d time.Duration) string {
	unit := func(n int64, word string) string {
		if n == 1 {
			return "1 " + word
		}
		return fmt.Sprintf("%d %ss", n, word)
	}
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return unit(int64(d/(24*time.Hour)), "day")
	case d >= time.Hour && d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d >= time.Minute && d%time.Minute == 0:
		return unit(int64(d/time.Minute), "minute")
	case d >= time.Second && d%time.Second == 0:
		return unit(int64(d/time.Second), "second")
	}
	return d.String()
}

// lastSeen is when m's host was last heard from (models.LastSeen).
func (s *Server) lastSeen(m *models.Machine) *time.Time {
	return models.LastSeen(s.Seen.LastSeen(m.ID), m)
}

// MaxSearch bounds the overview's search: a machine's name is at most 63
// characters.
const MaxSearch = 63

// knownState refuses a state filter that names no state: the page would
// count the whole fleet over an empty table; and a search longer than a
// name.
func (s *Server) knownState(c echo.Context) error {
	if st := c.QueryParam("state"); st != "" && !slices.Contains(AllStates, st) {
		return s.errorPage(c, http.StatusBadRequest, fmt.Sprintf("No state is named %q; the states are %s.", st, strings.Join(AllStates, ", ")))
	}
	// The search is a machine's name or part of one: a longer one matches
	// nothing, and each machine's name is searched for it.
	if q := c.QueryParam("q"); len(q) > MaxSearch {
		return s.errorPage(c, http.StatusBadRequest, fmt.Sprintf("The search is a machine's name or part of one: at most %d characters, not %d.", MaxSearch, len(q)))
	}
	return nil
}

func (s *Server) overview(c echo.Context) error {
	if err := s.knownState(c); err != nil {
		return err
	}
	o, err := s.overviewData(c.Request().Context(), c.QueryParam("state"), c.QueryParam("q"))
	if err != nil {
		return err
	}
	if o.Record, err = s.record(c.Request().Context()); err != nil {
		return err
	}
	return s.render(c, http.StatusOK, OverviewPage(s.page(c, "Machines"), o))
}

// record says how far back the record of sends, reports and declarations
// goes, and how long it is kept.
func (s *Server) record(ctx context.Context) (string, error) {
	since, err := s.Store.RecordSince(ctx)
	if err != nil {
		return "", err
	}
	kept := "kept for ever (--keep-sends 0)"
	if s.KeepSends > 0 {
		kept = "kept " + span(s.KeepSends) + "; older ones go, save each machine's latest send and report, its last applied send and declaration, and every send of its current generation"
	}
	if since == nil {
		return "No send on record yet: sends, reports and declarations are " + kept + ".", nil
	}
	if complete := time.Now().Add(-s.KeepSends); s.KeepSends > 0 && since.Before(complete) {
		// The oldest send on record is one a machine still needs (an idle
		// machine's latest): the record is whole only from keep ago.
		return "Every send since " + stamp(complete) + " is on record; of older ones, only those machines still need, the oldest from " +
			stamp(*since) + ": sends, reports and declarations are " + kept + ".", nil
	}
	return "The record of sends goes back to " + stamp(*since) + ": sends, reports and declarations are " + kept + ".", nil
}

// overviewFragment is the live table htmx polls.
func (s *Server) overviewFragment(c echo.Context) error {
	if err := s.knownState(c); err != nil {
		return err
	}
	o, err := s.overviewData(c.Request().Context(), c.QueryParam("state"), c.QueryParam("q"))
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, MachineTable(o))
}

// detail reads everything the machine page shows.
func (s *Server) detail(ctx context.Context, name string) (MachineDetail, *models.Machine, error) {
	// The machine and what was sent of its generation in one read (apart,
	// a generation made between them was said not sent).
	m, p, err := s.Store.MachineSent(ctx, name)
	if err != nil {
		return MachineDetail{}, nil, err
	}
	d := MachineDetail{Row: row(s.Rules, m, s.lastSeen(m), &p, time.Now()), Generation: m.Generation}
	sends, err := s.Store.Sends(ctx, m.ID, 50, "")
	if err != nil {
		return d, m, err
	}
	reps, _, err := s.Store.Reports(ctx, m.ID, 200, 0)
	if err != nil {
		return d, m, err
	}
	bySend := map[string][]ReportLine{}
	for _, r := range reps {
		bySend[r.SendID] = append(bySend[r.SendID], reportLine(r))
	}
	for _, sd := range sends {
		d.Sends = append(d.Sends, SendRow{ID: sd.ID, Time: stamp(sd.CreatedAt), Generation: sd.Generation, Instance: sd.InstanceID,
			Trigger: sd.Trigger, Outcome: sd.Outcome, Reason: models.EscapeLogLine(sd.Reason, journalWords), Reports: bySend[sd.ID]})
	}
	if d.Logs, err = s.logBlocks(ctx, m, time.Now()); err != nil {
		return d, m, err
	}
	up, version, err := s.Store.LastUpgrade(ctx, m.ID)
	if err != nil || up == nil {
		return d, m, err
	}
	d.Upgrade = upgradeWords(up, version)
	return d, m, nil
}

// upgradeWords says how a machine's newest host upgrade went.
func upgradeWords(up *models.RolloutMachine, version string) string {
	w := "to " + version + ": " + stateWords(up.State)
	switch {
	case up.FinishedAt != nil:
		w += " " + stamp(*up.FinishedAt)
	case up.StartedAt != nil:
		w += " since " + stamp(*up.StartedAt)
	}
	if up.Reason != "" {
		w += " — " + up.Reason
	}
	return w
}

// reportLine says a report in the journal's words, at most
// journalItems of its actions and of its checks, each at most
// journalWords bytes: a host's report may hold a megabyte, and the
// machine's page shows 200 reports, refreshed every 2 s (a host's 200
// reports of 30,000 actions each made a 96 MB page).
func reportLine(r models.ReportRow) ReportLine {
	l := ReportLine{ID: r.ID, Time: stamp(r.CreatedAt), Outcome: r.Outcome, Reason: models.EscapeLogLine(r.Reason, journalWords)}
	var body models.Report
	if json.Unmarshal([]byte(r.Body), &body) == nil {
		more := 0
		for _, a := range body.Actions {
			switch {
			case a.Action == "unchanged":
			case len(l.Actions) == journalItems:
				more++
			default:
				l.Actions = append(l.Actions, models.EscapeLogLine(a.Words(), journalWords))
			}
		}
		if more > 0 {
			l.Actions = append(l.Actions, fmt.Sprintf("… and %d more (the report, GET /api/v1/machines/{name}/reports, has them all)", more))
		}
		for i, c := range body.Checks {
			if i == journalItems {
				l.Checks = append(l.Checks, fmt.Sprintf("… and %d more checks", len(body.Checks)-i))
				break
			}
			word := "healthy"
			if !c.OK {
				word = "unhealthy"
			}
			// Without the check's own time: the body is kept as its host
			// sent it, on the host's clock (a host two hours ahead dated
			// its checks two hours after the report arrived, a lying one
			// any date). The line says when the report was received; the
			// machine's health, on this clock, says since when.
			l.Checks = append(l.Checks, models.EscapeLogLine(fmt.Sprintf("check %s: %s (%s)", c.Resource, word, c.Detail), journalWords))
		}
	}
	return l
}

// What of one report the machine's journal shows (reportLine).
const (
	journalItems = 50
	journalWords = 512
)

func (s *Server) machinePage(c echo.Context) error {
	ctx := c.Request().Context()
	d, m, err := s.detail(ctx, c.Param("name"))
	if errors.Is(err, models.ErrNotFound) {
		return s.errorPage(c, http.StatusNotFound, "No machine named "+c.Param("name")+".")
	}
	if err != nil {
		return err
	}
	if err := s.fillForms(ctx, &d, m, nil, nil); err != nil {
		return err
	}
	s.fillDeclaration(ctx, &d, m)
	if err := s.fillRunning(ctx, &d, m); err != nil {
		return err
	}
	d.Saved = s.takeSaved(c)
	return s.render(c, http.StatusOK, MachinePage(s.page(c, m.Name), d))
}

func (s *Server) machineStatus(c echo.Context) error {
	d, _, err := s.detail(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, MachineStatus(d))
}

// fillForms fills the assignment and variable forms: from the store, or
// from what the person submitted (kept when a save is refused).
func (s *Server) fillForms(ctx context.Context, d *MachineDetail, m *models.Machine, typed map[string]models.AssignmentView, typedVars *string) error {
	as, sel, _, err := s.Store.AssignmentsAndSelected(ctx, m.Name)
	if err != nil {
		return err
	}
	selected := map[string]string{}
	for _, a := range sel {
		w := "given by a selector"
		if a.Build != nil {
			w += fmt.Sprintf(", pinned to build %d (%s)", *a.Build, a.Reason)
		}
		selected[a.Module] = w
	}
	stored := map[string]models.AssignmentView{}
	for _, a := range as {
		stored[a.Module] = a
	}
	if typed == nil {
		typed = stored
	}
	mods, err := allModules(ctx, s.Store)
	if err != nil {
		return err
	}
	for _, mod := range mods {
		mc := ModuleChoice{Name: mod.Name, Selected: selected[mod.Name]}
		if mod.CurrentBuild != nil {
			mc.Current = fmt.Sprintf("current: %d", *mod.CurrentBuild)
		}
		if a, ok := typed[mod.Name]; ok {
			mc.Assigned, mc.Reason = true, a.Reason
			if a.Build != nil {
				mc.Build = strconv.FormatInt(*a.Build, 10)
			}
		}
		d.Modules = append(d.Modules, mc)
	}
	if typedVars != nil {
		d.Vars = *typedVars
	} else {
		vars, _, err := s.Store.Variables(ctx, m.Name)
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(vars))
		for k := range vars {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			d.Vars += varLine(k, vars[k]) + "\n"
		}
	}
	return nil
}

// fillDeclaration composes the current declaration (the bytes a poll
// will send) and compares it with what the host last applied.
func (s *Server) fillDeclaration(ctx context.Context, d *MachineDetail, m *models.Machine) {
	got, fails, err := s.Store.Compose(ctx, []int64{m.ID}, s.Instance, s.Signer)
	if err == nil && fails[m.ID] != nil {
		err = fails[m.ID]
	}
	if err != nil {
		d.DeclErr = problemText(err)
		return
	}
	next := payloadOf(got[m.ID].Sealed())
	pretty, _ := json.MarshalIndent(next, "", "  ")
	d.Decl = string(pretty)
	var prev *models.DeclarationPayload
	if m.AppliedGeneration > 0 {
		if old, err := s.Store.Declaration(ctx, m.ID, m.AppliedGeneration); err == nil {
			prev = payloadOf(old.Sealed())
		}
	}
	d.Diff = diff(prev, next)
}

func payloadOf(env []byte) *models.DeclarationPayload {
	var p models.DeclarationPayload
	payload, err := models.PayloadOf(env)
	if err != nil || json.Unmarshal(payload, &p) != nil {
		return nil
	}
	return &p
}

// diff is what applying next in full does to a machine that applied prev:
// every resource created, changed and removed.
func diff(prev, next *models.DeclarationPayload) []DiffRow {
	old := map[string]models.Resource{}
	if prev != nil {
		for _, r := range prev.Resources {
			old[r.ID] = r
		}
	}
	var out []DiffRow
	if next == nil {
		return out
	}
	seen := map[string]bool{}
	for _, r := range next.Resources {
		seen[r.ID] = true
		o, ok := old[r.ID]
		switch {
		case !ok:
			out = append(out, DiffRow{Resource: r.ID, Change: "create", Detail: describe(r)})
		default:
			a, _ := json.Marshal(o)
			b, _ := json.Marshal(r)
			if string(a) != string(b) {
				out = append(out, DiffRow{Resource: r.ID, Change: "change", Detail: fmt.Sprintf("build %d → %d; %s", o.Build, r.Build, describe(r))})
			}
		}
	}
	for _, r := range sortedResources(old) {
		if !seen[r.ID] {
			verb := "remove"
			if r.OnRemove == "forget" {
				verb = "forget"
			}
			out = append(out, DiffRow{Resource: r.ID, Change: verb, Detail: describe(r)})
		}
	}
	return out
}

func describe(r models.Resource) string {
	switch r.Kind {
	case "tree":
		return fmt.Sprintf("tree %s from %s", r.Path, r.Artifact.Digest)
	case "file":
		return fmt.Sprintf("file %s", r.Path)
	case "service":
		return "service " + strings.Join(r.Command, " ")
	}
	return r.Kind
}

func sortedResources(m map[string]models.Resource) []models.Resource {
	out := make([]models.Resource, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// formGeneration reads the generation the person's form was made from.
func formGeneration(c echo.Context) (*int64, error) {
	g, err := strconv.ParseInt(c.FormValue("generation"), 10, 64)
	if err != nil {
		return nil, models.Invalid("generation", "the form is missing the generation it was made from; reload the page")
	}
	return &g, nil
}

// refused re-renders the machine page with a plain message and what the
// person typed, when a save was refused (stale, invalid).
func (s *Server) refused(c echo.Context, name string, saveErr error, typed map[string]models.AssignmentView, typedVars *string, what string) error {
	ctx := c.Request().Context()
	d, m, err := s.detail(ctx, name)
	if err != nil {
		return err
	}
	if err := s.fillForms(ctx, &d, m, typed, typedVars); err != nil {
		return err
	}
	s.fillDeclaration(ctx, &d, m)
	status := http.StatusBadRequest
	if errors.Is(saveErr, models.ErrStaleGeneration) {
		status = http.StatusConflict
		sent, _ := formGeneration(c)
		// What is stored now of what the person edited: their variables
		// or their assignments (the variables' page listed assignments).
		names := []string{}
		if what == "variables" {
			vars, _, _ := s.Store.Variables(ctx, name)
			for _, k := range slices.Sorted(maps.Keys(vars)) {
				names = append(names, k+"="+vars[k])
			}
		} else {
			as, _, _ := s.Store.Assignments(ctx, name)
			for _, a := range as {
				n := a.Module
				if a.Build != nil {
					n += fmt.Sprintf(" (pinned to %d)", *a.Build)
				}
				names = append(names, n)
			}
		}
		stored := "none"
		if len(names) > 0 {
			stored = strings.Join(names, ", ")
		}
		if what == "push" {
			// Nothing was typed: what changed is the machine, shown below.
			d.Notice = fmt.Sprintf("Not pushed: %s changed since you opened this page (generation %d then, %d now: %s at %s). "+
				"Nothing was sent. Its page below is as it is now; push again if it still needs it.",
				name, *sent, m.Generation, m.GenerationTrigger, stamp(m.GenerationAt))
		} else {
			d.Notice = fmt.Sprintf("Not saved: %s changed since you opened this page (generation %d then, %d now: %s at %s). "+
				"Nothing was overwritten. Your %s are kept below; the %s stored now are: %s. Review, then save again to replace them.",
				name, *sent, m.Generation, m.GenerationTrigger, stamp(m.GenerationAt), what, what, stored)
		}
	} else {
		d.Notice = "Not saved: " + problemText(saveErr)
	}
	return s.render(c, status, MachinePage(s.page(c, name), d))
}

func (s *Server) saveAssignments(c echo.Context) error {
	name := c.Param("name")
	gen, err := formGeneration(c)
	if err != nil {
		return s.refused(c, name, err, nil, nil, "assignments")
	}
	form, err := c.FormParams()
	if err != nil {
		return s.refused(c, name, models.Invalid("form", err.Error()), nil, nil, "assignments")
	}
	// The modules checked, by the form's own fields: the store refuses a
	// name it has no module of (read from a page of modules, those past
	// it were dropped from a machine whose form was saved).
	var checked []string
	for k, v := range form {
		if mod, ok := strings.CutPrefix(k, "m_"); ok && mod != "" && len(v) > 0 && v[0] != "" {
			checked = append(checked, mod)
		}
	}
	slices.Sort(checked)
	typed := map[string]models.AssignmentView{}
	var as []models.AssignmentView
	var parseErr error
	for _, mod := range checked {
		a := models.AssignmentView{Module: mod, Reason: strings.TrimSpace(c.FormValue("r_" + mod))}
		if b := strings.TrimSpace(c.FormValue("b_" + mod)); b != "" {
			n, err := strconv.ParseInt(b, 10, 64)
			if err != nil {
				parseErr = models.Invalid("build of "+mod, "a build number")
			}
			a.Build = &n
		}
		typed[mod] = a
		as = append(as, a)
	}
	if parseErr != nil {
		return s.refused(c, name, parseErr, typed, nil, "assignments")
	}
	if as == nil {
		as = []models.AssignmentView{}
	}
	m, err := s.Store.SetAssignments(c.Request().Context(), "user:"+who(c).User, name, gen, as)
	if err != nil {
		return s.refused(c, name, err, typed, nil, "assignments")
	}
	return s.redirectSaved(c, "/machines/"+name, fmt.Sprintf("Assignments saved as generation %d", m.Generation))
}

// varLine is one variable as the form shows it, KEY=value: in quotes, as
// Go writes a string, when the value would not come back as it is from
// one trimmed line (a newline, a control character, a space at either
// end, a leading quote). Shown bare, a value "LOG_LEVEL=debug\nWORKERS=4"
// read as two variables, and a save made WORKERS one and cut the first.
func varLine(k, v string) string {
	if v != strings.TrimSpace(v) || strings.HasPrefix(v, `"`) || strings.ContainsFunc(v, unicode.IsControl) {
		return k + "=" + strconv.Quote(v)
	}
	return k + "=" + v
}

func (s *Server) saveVariables(c echo.Context) error {
	name := c.Param("name")
	text := c.FormValue("vars")
	gen, err := formGeneration(c)
	if err != nil {
		return s.refused(c, name, err, nil, &text, "variables")
	}
	vars := map[string]string{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return s.refused(c, name, models.Invalid(fmt.Sprintf("line %d", i+1), "KEY=value expected"), nil, &text, "variables")
		}
		if strings.HasPrefix(v, `"`) {
			if v, err = strconv.Unquote(v); err != nil {
				return s.refused(c, name, models.Invalid(fmt.Sprintf("line %d", i+1), `a value in quotes is written as the form shows one ("a\nb" for two lines)`), nil, &text, "variables")
			}
			// A \x escape makes any byte: the value is text all the same,
			// as the API's is (SQLite kept one PostgreSQL refused).
			if !utf8.ValidString(v) {
				return s.refused(c, name, models.Invalid(fmt.Sprintf("line %d", i+1), "not valid UTF-8 once its escapes are read"), nil, &text, "variables")
			}
		}
		vars[strings.TrimSpace(k)] = v
	}
	m, err := s.Service.SetVariables(c.Request().Context(), "user:"+who(c).User, &service.SetVariables{Machine: name, IfMatch: gen, Variables: vars})
	if err != nil {
		return s.refused(c, name, err, nil, &text, "variables")
	}
	return s.redirectSaved(c, "/machines/"+name, fmt.Sprintf("Variables saved as generation %d", m.Generation))
}

func (s *Server) push(c echo.Context) error {
	name := c.Param("name")
	gen, err := formGeneration(c)
	if err != nil {
		return s.refused(c, name, err, nil, nil, "push")
	}
	m, err := s.Store.Push(c.Request().Context(), "user:"+who(c).User, name, gen)
	if err != nil {
		return s.refused(c, name, err, nil, nil, "push")
	}
	return s.redirectSaved(c, "/machines/"+name, fmt.Sprintf("Pushed as generation %d", m.Generation))
}
