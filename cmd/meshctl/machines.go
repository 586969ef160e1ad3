package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mesh/client"
	"mesh/models"
)

func (a *app) machinesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "machines", Aliases: []string{"machine"}, Short: "Machines and their state"}
	var state string
	ls := &cobra.Command{
		Use:     "ls [--state STATE]",
		Aliases: []string{"list"},
		Short:   "List every machine (or those in one state) with its state and why",
		Example: `  meshctl machines ls
  meshctl machines ls --state behind      # which machines are behind, and why`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			var only *client.ListMachinesParamsState
			if state != "" {
				s := client.ListMachinesParamsState(state)
				only = &s
			}
			ms, raw, err := collect[client.Machine](0, func(cursor *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListMachinesWithResponse(cmd.Context(), &client.ListMachinesParams{Limit: &n, Cursor: cursor, State: only})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
			return list(a, ms, raw, []string{"NAME", "STATE", "GENERATION", "APPLIED", "HEALTH", "HOST", "LAST SEEN", "WHY"}, func(m client.Machine) []string {
				return []string{m.Name, string(m.State), strconv.Itoa(m.Generation), strconv.Itoa(m.AppliedGeneration),
					healthColumn(&m), m.HostVersion, ago(m.LastSeen), clip(why(&m), 120)}
			})
		},
	}
	ls.Flags().StringVar(&state, "state", "", "only the machines in this state: current, behind, refused, failed, rejected, conflict, revoked, offline, upgrading, rolled_back or unhealthy")
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "A machine's state, health, why, and its assignments",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			r, err := c.GetMachineWithResponse(cmd.Context(), args[0])
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			as, err := c.GetAssignmentsWithResponse(cmd.Context(), args[0])
			if err != nil {
				return reach(err)
			}
			if err := expect(as.HTTPResponse, as.Body, http.StatusOK); err != nil {
				return err
			}
			var selected []client.Assignment
			if as.JSON200.Selected != nil {
				selected = *as.JSON200.Selected
			}
			return a.showMachine(r.JSON200, as.JSON200.Assignments, selected)
		},
	}
	cmd.AddCommand(ls, show, a.labelCommand(), a.varsCommand(), a.reportsCommand(), a.declarationCommand())
	cmd.AddCommand(a.machineAdminCommands()...)
	return cmd
}

func (a *app) showMachine(m *client.Machine, as, selected []client.Assignment) error {
	health := string(m.Health.State)
	switch m.Health.State {
	case client.Failing:
		health = fmt.Sprintf("failing: %s since %s: %s", m.Health.Check, ago(m.Health.Since), m.Health.Detail)
	case client.None:
		health = "none (no checks declared)"
		if m.AppliedGeneration == 0 {
			// Nothing applied yet: no check ran, whatever is declared.
			health = "none yet: its host has applied nothing, so no check has run"
		}
	}
	if m.Health.CheckedAt != nil && healthPast(m) {
		health += fmt.Sprintf(" — as its host last said, %s; %s now, so no fact of now", ago(m.Health.CheckedAt), m.State)
	}
	rows := [][]string{
		{"Machine:", m.Name + " (" + m.Os + "/" + m.Arch + ")"},
		{"State:", string(m.State)},
		{"Why:", why(m)},
		{"Health:", health},
		{"Generation:", fmt.Sprintf("%d (%s, %s); applied %d; finished %d", m.Generation, m.GenerationTrigger, ago(&m.GenerationAt), m.AppliedGeneration, m.FinishedGeneration)},
		{"Host:", firstNonEmpty(m.HostVersion, "-") + targetWords(m) + launcherWords(m)},
		{"Last seen:", lastSeenWords(m)},
	}
	if m.LastOutcome != "" {
		last := strings.TrimSuffix(m.LastOutcome+": "+m.LastReason, ": ")
		if m.LastOutcomeAt != nil {
			last += " (" + ago(m.LastOutcomeAt) + ")"
		}
		rows = append(rows, []string{"Last outcome:", last})
	}
	words := func(list []client.Assignment) []string {
		var mods []string
		for _, x := range list {
			s := x.Module
			if x.Build != nil {
				s += "@" + strconv.Itoa(*x.Build) + " (pinned"
				if x.Reason != nil && *x.Reason != "" {
					s += ": " + *x.Reason
				}
				s += ")"
			}
			if rb, ok := m.Running[x.Module]; ok {
				s += fmt.Sprintf(", running build %d", rb.Build)
			}
			mods = append(mods, s)
		}
		return mods
	}
	mods := words(as)
	if len(mods) == 0 {
		mods = []string{"none"}
	}
	rows = append(rows, []string{"Assigned:", mods[0]})
	for _, s := range mods[1:] {
		rows = append(rows, []string{"", s})
	}
	// What selectors give it besides, with a plan rollback's pin on it.
	for i, s := range words(selected) {
		label := ""
		if i == 0 {
			label = "Selected:"
		}
		rows = append(rows, []string{label, s})
	}
	// What its host last reported running: a module a selector gives it
	// is not an assignment, and "Assigned: none" read as nothing running.
	running := make([]string, 0, len(m.Running))
	for mod, rb := range m.Running {
		running = append(running, fmt.Sprintf("%s@%d", mod, rb.Build))
	}
	sort.Strings(running)
	if len(running) == 0 {
		running = []string{"nothing reported"}
	}
	rows = append(rows, []string{"Running:", strings.Join(running, ", ")})
	if m.Yanked != nil {
		for i, y := range *m.Yanked {
			label := ""
			if i == 0 {
				label = "Yanked:"
			}
			rows = append(rows, []string{label, fmt.Sprintf("%s build %d (%s); it keeps running here", y.Module, y.Build, y.Reason)})
		}
	}
	return a.table(rows)
}

// launcherWords names the launcher running the host, when it has one.
func launcherWords(m *client.Machine) string {
	if m.LauncherVersion == "" {
		return ""
	}
	return "; launcher " + m.LauncherVersion
}

func targetWords(m *client.Machine) string {
	if m.TargetHostVersion != "" && m.TargetHostVersion != m.HostVersion {
		return ", target " + m.TargetHostVersion
	}
	return ""
}

// why says in words what a machine's state rests on.
func why(m *client.Machine) string {
	switch m.State {
	case client.MachineStateConflict:
		// When it was found and when its host last said anything: one its
		// host keeps saying is told from one said once by a host gone since.
		w := models.ConflictWhy(int64(m.ConflictHostGeneration), int64(m.Generation))
		if m.ConflictAt != nil {
			w += "; found " + ago(m.ConflictAt)
		}
		return w + "; its host last seen " + ago(m.LastSeen) + ": an admin must resolve it"
	case client.MachineStateRevoked:
		w := "revoked: " + m.RevokedReason
		if m.RevokedAt != nil {
			w += "; " + models.RevokedWhen(m.RevokedBy, *m.RevokedAt, time.Now())
		}
		return w + "; delete it and enrol the machine again to bring it back"
	case client.MachineStateOffline:
		if !models.Polled(m.LastSeen, m.CreatedAt) {
			return "its host has never polled (enrolled " + ago(&m.CreatedAt) + ")"
		}
		w := "no poll since " + m.LastSeen.Local().Format(localTime)
		if m.Generation > m.FinishedGeneration {
			// Offline is the state; that it is behind, and since when, is
			// what a person looking for machines behind needs too.
			w += fmt.Sprintf("; behind by %d generation(s): %d made %s (%s), %d the last it finished",
				m.Generation-m.FinishedGeneration, m.Generation, ago(&m.GenerationAt), m.GenerationTrigger, m.FinishedGeneration)
		}
		return w
	case client.MachineStateUnhealthy:
		w := fmt.Sprintf("check %s failing since %s: %s", m.Health.Check, ago(m.Health.Since), m.Health.Detail)
		if m.Health.CheckedAt != nil {
			w += fmt.Sprintf(" (as of its report %s)", ago(m.Health.CheckedAt))
		}
		return w
	case client.MachineStateFailed:
		// A failed attempt finishes nothing: it names the generation that
		// failed, and the one the host applied (the last finished may be
		// one it rejected).
		if m.LastOutcomeGeneration == 0 {
			return fmt.Sprintf("failed (of no generation; it applied %d): %s%s", m.AppliedGeneration, m.LastReason, reportedWhen(m))
		}
		return fmt.Sprintf("generation %d failed (it applied %d): %s%s", m.LastOutcomeGeneration, m.AppliedGeneration, m.LastReason, reportedWhen(m))
	case client.MachineStateRefused, client.MachineStateRejected, client.MachineStateRolledBack:
		if m.LastOutcomeGeneration == 0 {
			// Tied to no send: it says nothing of a generation.
			return fmt.Sprintf("%s (of no generation; it applied generation %d): %s%s", m.LastOutcome, m.AppliedGeneration, m.LastReason, reportedWhen(m))
		}
		return fmt.Sprintf("%s generation %d: %s%s", m.LastOutcome, m.LastOutcomeGeneration, m.LastReason, reportedWhen(m))
	case client.MachineStateUpgrading:
		w := "upgrading its host to " + m.TargetHostVersion
		if m.ComposeError != "" {
			w += fmt.Sprintf("; generation %d cannot be composed: %s", m.Generation, m.ComposeError)
		}
		if models.RefusedTarget(m.TargetHostVersion, m.LastOutcome, m.LastReason) {
			w += "; its host refused it: " + m.LastReason
		}
		return w
	case client.MachineStateBehind:
		since := fmt.Sprintf(" (since %s, %s)", ago(&m.GenerationAt), m.GenerationTrigger)
		switch {
		case m.HeldBack != "":
			return m.HeldBack + since + "; it keeps receiving what its host can decode until a host rollout upgrades it"
		case m.ComposeError != "":
			return fmt.Sprintf("generation %d cannot be composed: %s%s", m.Generation, m.ComposeError, since)
		case !models.Polled(m.LastSeen, m.CreatedAt):
			return fmt.Sprintf("generation %d not sent yet: its host has never polled (enrolled %s)%s", m.Generation, ago(&m.CreatedAt), since)
		case m.StateWords != nil:
			// The controller read what was sent of the generation: sent
			// and awaiting its host's report, or not sent yet, as the
			// dashboard says it.
			return m.StateWords.Badge + " " + m.StateWords.Since
		}
		return fmt.Sprintf("generation %d not applied yet; applied %d%s; the host last polled %s", m.Generation, m.AppliedGeneration, since, ago(m.LastSeen))
	}
	w := fmt.Sprintf("applied generation %d, the latest", m.AppliedGeneration)
	if m.Health.State == client.Failing {
		// Current until the grace is past; what fails is said, not hidden.
		w += fmt.Sprintf("; check %s failing since %s, within the grace: %s", m.Health.Check, ago(m.Health.Since), m.Health.Detail)
	}
	return w
}

// healthColumn is a machine's health for a list, with when its host last
// said so for an offline or revoked machine: its "passing" is its last
// report's, not a fact of now (/metrics counts it unknown). (An online
// host reports its checks when they change, so its health stands however
// long ago that was.)
func healthColumn(m *client.Machine) string {
	h := string(m.Health.State)
	if m.Health.CheckedAt != nil && healthPast(m) {
		h += " (" + ago(m.Health.CheckedAt) + ")"
	}
	return h
}

// healthPast says whether a machine's health is only what its host last
// said: it is offline, or revoked (nothing it says is heard).
func healthPast(m *client.Machine) bool {
	return m.State == client.MachineStateOffline || m.State == client.MachineStateRevoked
}

// reportedWhen says when the last outcome was reported ("" when the
// controller does not say).
func reportedWhen(m *client.Machine) string {
	if m.LastOutcomeAt == nil {
		return ""
	}
	return " (reported " + ago(m.LastOutcomeAt) + ")"
}

// maxAttempts bounds the read-edit-write of assignments when others keep
// changing the machine.
const maxAttempts = 5

// assignmentEdit changes one module's entry in a machine's assignments; it
// says false when the list already is as asked. It is applied to the list
// as read, and again to a fresh read after a 412, so only this command's
// own edit is ever written over what others did.
type assignmentEdit func(list, selected []client.Assignment) ([]client.Assignment, bool, error)

func (a *app) assignCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "assign MACHINE MODULE[@BUILD] [--reason R]",
		Short: "Give a machine a module (pinned to a build with @BUILD)",
		Long: `Give a machine a module, or change that module's pin. meshctl reads the
machine's assignments and generation, changes this one module, and writes
them with If-Match. When the machine changed in between (412) it reads
them again and re-applies only its own edit to the fresh list, so a change
it did not see is never overwritten; after a few tries it gives up.
Pinning an older build than the machine runs needs --reason.`,
		Example: `  meshctl assign m1 node-tools
  meshctl assign m1 node-tools@16 --reason "17 leaks memory"`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			module, build, err := parseModuleBuild(args[1])
			if err != nil {
				return err
			}
			want := client.Assignment{Module: module, Build: build}
			if reason != "" {
				want.Reason = &reason
			}
			err = a.editAssignments(cmd.Context(), args[0], func(list, _ []client.Assignment) ([]client.Assignment, bool, error) {
				i := slices.IndexFunc(list, func(x client.Assignment) bool { return x.Module == module })
				if i < 0 {
					return append(list, want), true, nil
				}
				if sameAssignment(list[i], want) {
					return list, false, nil
				}
				list[i] = want
				return list, true, nil
			})
			if err == nil && build == nil && !a.jsonOut() {
				a.sayIfNoBuild(cmd.Context(), module)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (needed to pin an older build than the machine runs)")
	return cmd
}

func (a *app) unassignCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "unassign MACHINE MODULE",
		Short: "Take a module from a machine",
		Long: `Take a module from a machine, by the same read, edit and If-Match write as
assign. Taking its last module empties the machine on purpose: its host
removes everything the mesh put there.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			module := args[1]
			return a.editAssignments(cmd.Context(), args[0], func(list, selected []client.Assignment) ([]client.Assignment, bool, error) {
				i := slices.IndexFunc(list, func(x client.Assignment) bool { return x.Module == module })
				if i < 0 && slices.ContainsFunc(selected, func(x client.Assignment) bool { return x.Module == module }) {
					// Its labels give it the module: taking it away is a
					// matter of those, not of its assignments.
					return nil, false, fmt.Errorf("%s is not assigned %s, its selector gives it: change the machine's labels "+
						"(meshctl machines label %s KEY-) or the module's selector (meshctl modules update %s --selector …)", args[0], module, args[0], module)
				}
				if i < 0 {
					return nil, false, fmt.Errorf("%s is not assigned %s", args[0], module)
				}
				return slices.Delete(list, i, i+1), true, nil
			})
		},
	}
}

// editAssignments reads, edits and writes a machine's assignments with
// If-Match, reading again after each 412.
func (a *app) editAssignments(ctx context.Context, machine string, edit assignmentEdit) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		got, err := c.GetAssignmentsWithResponse(ctx, machine)
		if err != nil {
			return reach(err)
		}
		if err := expect(got.HTTPResponse, got.Body, http.StatusOK); err != nil {
			return err
		}
		etag := got.HTTPResponse.Header.Get("ETag")
		var selected []client.Assignment
		if got.JSON200.Selected != nil {
			selected = *got.JSON200.Selected
		}
		list, changed, err := edit(slices.Clone(got.JSON200.Assignments), selected)
		if err != nil {
			return err
		}
		if !changed {
			if a.jsonOut() {
				return a.printJSON(got.Body)
			}
			fmt.Fprintf(a.out, "%s already has that; nothing written (generation %s).\n", machine, strings.Trim(etag, `"`))
			return nil
		}
		if list == nil {
			list = []client.Assignment{} // [], never null: an empty list is meant
		}
		put, err := c.SetAssignmentsWithResponse(ctx, machine, &client.SetAssignmentsParams{IfMatch: etag},
			client.SetAssignmentsJSONRequestBody{Assignments: list})
		if err != nil {
			return reach(err)
		}
		if put.StatusCode() == http.StatusPreconditionFailed {
			if attempt == maxAttempts {
				return fmt.Errorf("%s kept changing while meshctl wrote it (%d tries, each a 412); nothing was written", machine, attempt)
			}
			fmt.Fprintf(a.errOut, "%s changed since it was read at generation %s; reading it again and re-applying this edit\n",
				machine, strings.Trim(etag, `"`))
			continue
		}
		if err := expect(put.HTTPResponse, put.Body, http.StatusOK); err != nil {
			return err
		}
		if a.jsonOut() {
			return a.printJSON(put.Body)
		}
		fmt.Fprintf(a.out, "%s: generation %s\n", machine, strings.Trim(put.HTTPResponse.Header.Get("ETag"), `"`))
		if err := a.assignmentTable(put.JSON200.Assignments); err != nil {
			return err
		}
		a.sayIfNotComposable(ctx, c, machine)
		return nil
	}
}

// sayIfNoBuild tells, on stderr, that a module assigned has no build yet:
// the machine is given nothing of it (and stays current) until its first
// build, where the table's "current" read as if something were deployed.
func (a *app) sayIfNoBuild(ctx context.Context, module string) {
	c, err := a.apiClient()
	if err != nil {
		return
	}
	r, err := c.GetModuleWithResponse(ctx, module)
	if err == nil && r.JSON200 != nil && r.JSON200.CurrentBuild == nil {
		fmt.Fprintf(a.errOut, "note: %s has no build yet: nothing of it is deployed until its first build (meshctl builds upload %s …)\n", module, module)
	}
}

// sayIfNotComposable tells, on stderr, that the machine's new generation
// cannot be composed, and why: nothing is sent to it until that is fixed
// (an edit said only "generation N", and the why was on machines show).
// The controller's preview composes it now; nothing is sent.
func (a *app) sayIfNotComposable(ctx context.Context, c *client.ClientWithResponses, machine string) {
	r, err := c.PreviewDeclarationWithResponse(ctx, machine)
	if err != nil || r.StatusCode() != http.StatusConflict {
		return
	}
	var pe *problemError
	if err := expect(r.HTTPResponse, r.Body, http.StatusOK); errors.As(err, &pe) && pe.Problem.Detail != nil {
		fmt.Fprintf(a.errOut, "note: %s's generation cannot be composed, so nothing is sent to it until that is fixed: %s\n", machine, *pe.Problem.Detail)
	}
}

func (a *app) assignmentTable(as []client.Assignment) error {
	rows := [][]string{{"MODULE", "BUILD", "REASON"}}
	for _, x := range as {
		b, r := "current", ""
		if x.Build != nil {
			b = strconv.Itoa(*x.Build)
		}
		if x.Reason != nil {
			r = *x.Reason
		}
		rows = append(rows, []string{x.Module, b, r})
	}
	return a.table(rows)
}

// parseModuleBuild splits MODULE[@BUILD].
func parseModuleBuild(s string) (string, *int, error) {
	module, b, pinned := strings.Cut(s, "@")
	if module == "" {
		return "", nil, fmt.Errorf("%q: want MODULE or MODULE@BUILD", s)
	}
	if !pinned {
		return module, nil, nil
	}
	n, err := strconv.Atoi(b)
	if err != nil || n < 1 {
		return "", nil, fmt.Errorf("%q: the build after @ is a build number (1, 2, …)", s)
	}
	return module, &n, nil
}

func sameAssignment(x, y client.Assignment) bool {
	eqInt := func(p, q *int) bool { return (p == nil) == (q == nil) && (p == nil || *p == *q) }
	eqStr := func(p, q *string) bool { return firstNonEmpty(deref(p)) == firstNonEmpty(deref(q)) }
	return x.Module == y.Module && eqInt(x.Build, y.Build) && eqStr(x.Reason, y.Reason)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// lastSeenWords says when a machine's host was last heard from, or that it
// never polled (enrolment sets the time too).
func lastSeenWords(m *client.Machine) string {
	if !models.Polled(m.LastSeen, m.CreatedAt) {
		return "never polled (enrolled " + ago(&m.CreatedAt) + ")"
	}
	return ago(m.LastSeen)
}
