package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mesh/client"
)

func (a *app) plansCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "plans", Aliases: []string{"plan"}, Short: "Plans: a build reaching a module's machines tier by tier"}
	var limit int
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List plans, newest first",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return errors.New("--limit: a number of plans from 1 up (0: all)")
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			ps, raw, err := collect[client.Plan](limit, func(cursor *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListPlansWithResponse(cmd.Context(), &client.ListPlansParams{Limit: &n, Cursor: cursor})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			return list(a, ps, raw, []string{"ID", "MODULE", "BUILD", "STATE", "TIER", "BY", "CREATED", "REASON"}, func(p client.Plan) []string {
				return []string{strconv.Itoa(p.Id), p.Module, strconv.Itoa(p.Build), string(p.State),
					tierOf(p), p.CreatedBy, ago(&p.CreatedAt), clip(p.Reason, 60)}
			})
		},
	}
	ls.Flags().IntVar(&limit, "limit", 20, "how many plans (0: all)")

	show := &cobra.Command{
		Use:   "show ID",
		Short: "A plan, its state and why, and its steps per machine",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.planAction(cmd.Context(), args[0], "show", nil)
		},
	}
	var interval time.Duration
	watch := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a plan with a progress bar per tier until it ends",
		Long: `Follow a plan, polling it every second, with a progress bar per tier (a
line per change when the output is not a terminal). Exits 0 when the plan
is done; 2 when it is halted, cancelled, rolled_back, refused or
superseded, printing the reason. A paused plan is watched on. With -o json
the progress goes to stderr and the final plan, as the API gives it, to
stdout.`,
		Example: `  meshctl plans watch 12 && echo deployed`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.watchPlan(cmd.Context(), args[0], interval)
		},
	}
	watch.Flags().DurationVar(&interval, "interval", time.Second, "how often to poll the plan")
	var hostFirst string
	create := &cobra.Command{
		Use:   "create MODULE@BUILD",
		Short: "Make a plan of a finished build by hand",
		Long: `Make a plan of a finished build by hand: the build reaches the module's
machines tier by tier, then becomes current. With --host-release-first, the
plan first rolls that host release out (canary first, each machine on
trial) to its machines whose hosts lack a schema the release decodes; its
tiers wait until that rollout is done, and the plan halts, saying why, if
the rollout halts. Use it for a build that needs a declaration schema some
of its machines' hosts do not decode yet (they show "held back"). Exits 2
when the plan is made refused (a yanked build) or superseded (a build older
than the current one), printing the reason.`,
		Example: `  meshctl plans create web@2 --host-release-first 1.5.0`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.createPlan(cmd.Context(), args[0], hostFirst)
		},
	}
	create.Flags().StringVar(&hostFirst, "host-release-first", "", "a host release to roll out to the plan's machines before its first tier")
	cmd.AddCommand(ls, show, watch, create)
	for _, action := range []struct{ name, short string }{
		{"pause", "Pause a running plan"},
		{"resume", "Resume a paused plan (a halted tier is judged again)"},
		{"cancel", "Cancel a running, paused or halted plan"},
		{"rollback", "Roll a halted plan back: every machine it reached is pinned to the build it ran before"},
	} {
		var tier int
		act := &cobra.Command{
			Use:     action.name + " ID",
			Short:   action.short,
			Args:    cobra.ExactArgs(1),
			Example: fmt.Sprintf("  meshctl plans %s 3\n  meshctl plans %s 3 --tier 1   # only if it is still at its first tier", action.name, action.name),
			RunE: func(cmd *cobra.Command, args []string) error {
				var seen *int64
				if cmd.Flags().Changed("tier") {
					if tier < 1 {
						return fmt.Errorf("--tier %d: tiers count from 1, as plans show says them", tier)
					}
					t := int64(tier - 1)
					seen = &t
				}
				return a.planAction(cmd.Context(), args[0], action.name, seen)
			},
		}
		act.Flags().IntVar(&tier, "tier", 0, "act only if the plan is still at this tier (as plans show says it, 1 the first): a resume does not go on past a tier you have not seen")
		cmd.AddCommand(act)
	}
	return cmd
}

// createPlan makes a plan of MODULE@BUILD and shows it.
func (a *app) createPlan(ctx context.Context, arg, hostFirst string) error {
	module, build, err := parseModuleBuild(arg)
	if err != nil {
		return err
	}
	if build == nil {
		return fmt.Errorf("%q: want MODULE@BUILD, the build to roll out", arg)
	}
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	body := client.CreatePlanJSONRequestBody{Module: module, Build: *build}
	if hostFirst != "" {
		body.HostReleaseFirst = &hostFirst
	}
	r, err := c.CreatePlanWithResponse(ctx, body)
	if err != nil {
		return reach(err)
	}
	if err := expect(r.HTTPResponse, r.Body, http.StatusCreated); err != nil {
		return err
	}
	if a.jsonOut() {
		err = a.printJSON(r.Body)
	} else {
		err = a.showPlan(r.JSON201)
	}
	if err != nil {
		return err
	}
	// A plan made but refused (a yanked build) or superseded at once (an
	// older build than current) rolls nothing out: a script is told so,
	// as plans watch tells it of a plan that ends so (exit 2).
	if p := r.JSON201; p != nil && (p.State == client.PlanStateRefused || p.State == client.PlanStateSuperseded) {
		reason := strings.TrimPrefix(firstNonEmpty(p.Reason, "no reason given"), string(p.State)+": ")
		return &exitError{code: 2, msg: fmt.Sprintf("plan %d %s: %s", p.Id, p.State, reason)}
	}
	return nil
}

// planAction shows a plan, or pauses, resumes, cancels or rolls it back
// and shows what it became.
// seen is the tier the person read the plan at (nil: act wherever it is).
func (a *app) planAction(ctx context.Context, arg, action string, seen *int64) error {
	id, err := planID(arg)
	if err != nil {
		return err
	}
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	var hr *http.Response
	var body []byte
	switch action {
	case "show":
		var r *client.GetPlanResponse
		if r, err = c.GetPlanWithResponse(ctx, id); err == nil {
			hr, body = r.HTTPResponse, r.Body
		}
	case "pause":
		var r *client.PausePlanResponse
		if r, err = c.PausePlanWithResponse(ctx, id, &client.PausePlanParams{Tier: seen}); err == nil {
			hr, body = r.HTTPResponse, r.Body
		}
	case "resume":
		var r *client.ResumePlanResponse
		if r, err = c.ResumePlanWithResponse(ctx, id, &client.ResumePlanParams{Tier: seen}); err == nil {
			hr, body = r.HTTPResponse, r.Body
		}
	case "cancel":
		var r *client.CancelPlanResponse
		if r, err = c.CancelPlanWithResponse(ctx, id, &client.CancelPlanParams{Tier: seen}); err == nil {
			hr, body = r.HTTPResponse, r.Body
		}
	case "rollback":
		var r *client.RollbackPlanResponse
		if r, err = c.RollbackPlanWithResponse(ctx, id, &client.RollbackPlanParams{Tier: seen}); err == nil {
			hr, body = r.HTTPResponse, r.Body
		}
	default:
		return fmt.Errorf("no plan action %q", action)
	}
	if err != nil {
		return reach(err)
	}
	if err := expect(hr, body, http.StatusOK); err != nil {
		return err
	}
	if a.jsonOut() {
		return a.printJSON(body)
	}
	var plan client.Plan
	if err := json.Unmarshal(body, &plan); err != nil {
		return reach(err)
	}
	return a.showPlan(&plan)
}

func (a *app) showPlan(p *client.Plan) error {
	rows := [][]string{
		{"Plan:", fmt.Sprintf("%d: build %d of %s", p.Id, p.Build, p.Module)},
		{"State:", string(p.State)},
	}
	if p.Reason != "" {
		rows = append(rows, []string{"Why:", p.Reason})
	}
	if p.HostRelease != "" {
		rows = append(rows, []string{"Host step:", hostStepWords(p)})
	}
	rows = append(rows, []string{"Tier:", tierOf(*p)}, []string{"By:", p.CreatedBy + ", " + ago(&p.CreatedAt)})
	if aside := pinnedAsideWords(p); aside != "" {
		rows = append(rows, []string{"Pinned aside:", aside})
	}
	if p.FinishedAt != nil {
		// A halted plan has stopped, not finished: it may be resumed or
		// rolled back.
		label := "Finished:"
		if p.State == client.PlanStateHalted {
			label = "Halted:"
		}
		rows = append(rows, []string{label, ago(p.FinishedAt)})
	}
	if err := a.table(rows); err != nil {
		return err
	}
	fmt.Fprintln(a.out)
	steps := [][]string{{"MACHINE", "TIER", "STATE", "GENERATION", "PREVIOUS", "REASON"}}
	for _, s := range p.Steps {
		prev := "-"
		if s.PreviousBuild != nil && *s.PreviousBuild > 0 {
			prev = strconv.Itoa(*s.PreviousBuild)
		}
		state, why := string(s.State), s.Reason
		if s.State == client.PlanStepStateSent && why == "" {
			// The plan made the machine's generation; whether it was sent
			// is its host's poll's doing (machines show says): said as
			// what was checked, as the dashboard says it.
			state, why = "awaiting", fmt.Sprintf("generation %d made for it, awaiting its host's report", s.Generation)
			if s.HostOfflineSince != nil {
				state, why = "offline", fmt.Sprintf("generation %d made for it; its host is offline, last heard from %s: nothing reaches the machine until it polls again",
					s.Generation, ago(s.HostOfflineSince))
			}
		}
		steps = append(steps, []string{s.Machine, strconv.Itoa(s.Tier + 1), state, strconv.Itoa(s.Generation), prev, why})
	}
	return a.table(steps)
}

// watchPlan follows a plan until it ends: nil when done, an exitError
// (code 2) with the reason when it ended otherwise.
func (a *app) watchPlan(ctx context.Context, arg string, interval time.Duration) error {
	if interval <= 0 {
		return errors.New("--interval: a positive duration, like 1s")
	}
	id, err := planID(arg)
	if err != nil {
		return err
	}
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	w := a.out
	if a.jsonOut() {
		w = a.errOut
	}
	view := newProgress(w, fmt.Sprintf("plan %d", id))
	var last *client.GetPlanResponse
	err = poll(ctx, interval, a.errOut, func() (bool, error) {
		r, err := c.GetPlanWithResponse(ctx, id)
		if err != nil {
			return false, reach(err)
		}
		if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
			return false, err
		}
		last = r
		p := r.JSON200
		view.show(watchHead(p), planGroups(p))
		return p.State != client.PlanStateRunning && p.State != client.PlanStatePaused, nil
	})
	view.end()
	if err != nil {
		return err
	}
	if a.jsonOut() {
		if err := a.printJSON(last.Body); err != nil {
			return err
		}
	}
	p := last.JSON200
	if p.State == client.PlanStateDone {
		if !a.jsonOut() {
			fmt.Fprintf(a.out, "plan %d done: build %d of %s is current\n", p.Id, p.Build, p.Module)
			if aside := pinnedAsideWords(p); aside != "" {
				fmt.Fprintf(a.out, "not moved by it, pinned by a person: %s\n", aside)
			}
		}
		return nil
	}
	// The reason may begin with the state's own word ("halted: tier 1 …").
	reason := strings.TrimPrefix(firstNonEmpty(p.Reason, "no reason given"), string(p.State)+": ")
	return &exitError{code: 2, msg: fmt.Sprintf("plan %d %s: %s", p.Id, p.State, reason)}
}

// pinnedAsideWords says the module's machines a person pins, which no plan
// moves: "m2 at build 1 (hold for the db migration)" ("" when none).
func pinnedAsideWords(p *client.Plan) string {
	var ws []string
	for _, m := range p.PinnedAside {
		w := fmt.Sprintf("%s at build %d", m.Machine, m.Build)
		if m.Reason != "" {
			w += " (" + m.Reason + ")"
		}
		ws = append(ws, w)
	}
	return strings.Join(ws, ", ")
}

// watchHead is plans watch's line of a plan: its build and state, and a
// paused plan's why and how to answer it (it waits for a person; the
// watch said only "paused", and waited).
func watchHead(p *client.Plan) string {
	head := fmt.Sprintf("(build %d of %s): %s", p.Build, p.Module, p.State)
	if p.State == client.PlanStatePaused {
		// Its reason says the state: "paused by user:carol", "paused:
		// untried: …".
		if p.Reason != "" {
			head = fmt.Sprintf("(build %d of %s): %s", p.Build, p.Module, p.Reason)
		}
		head += fmt.Sprintf(" — waiting for a person: meshctl plans resume %d --tier %d, or cancel", p.Id, p.Tier+1)
	}
	return head
}

// hostStepWords says where a plan's host step is: "1.5.0 first: rollout
// running; m1 upgrading, m2 pending".
func hostStepWords(p *client.Plan) string {
	s := p.HostRelease + " first"
	ro := p.HostStep
	if ro == nil {
		return s + ": no rollout started"
	}
	s += ": rollout " + string(ro.State)
	if ro.Reason != "" {
		s += " (" + ro.Reason + ")"
	}
	if len(ro.Machines) == 0 {
		return s + "; no machine needed it"
	}
	var ms []string
	for _, m := range ro.Machines {
		ms = append(ms, m.Machine+" "+strings.ReplaceAll(string(m.State), "_", " "))
	}
	return s + "; " + strings.Join(ms, ", ")
}

// planGroups counts a plan's host step's machines (when it has one) and
// its steps per tier.
func planGroups(p *client.Plan) []group {
	tiers := 0
	for _, s := range p.Steps {
		tiers = max(tiers, s.Tier+1)
	}
	gs := make([]group, tiers)
	for i := range gs {
		gs[i].name = fmt.Sprintf("tier %d/%d", i+1, tiers)
		if i == 0 && tiers > 1 {
			gs[i].name += " (canary)"
		}
	}
	var host []group
	if ro := p.HostStep; ro != nil {
		h := group{name: "host " + ro.Version, total: len(ro.Machines)}
		for _, m := range ro.Machines {
			switch m.State {
			case client.RolloutMachineStateUpgraded:
				h.done++
			case client.RolloutMachineStateUpgrading:
				h.busy++
			case client.RolloutMachineStateFailed, client.RolloutMachineStateRolledBack:
				h.failed++
			}
		}
		host = append(host, h)
	}
	for _, s := range p.Steps {
		g := &gs[s.Tier]
		g.total++
		switch s.State {
		case client.PlanStepStateApplied:
			g.done++
		case client.PlanStepStateSent:
			g.busy++
		case client.PlanStepStateFailed:
			g.failed++
		}
	}
	return append(host, gs...)
}

func tierOf(p client.Plan) string {
	tiers := 0
	for _, s := range p.Steps {
		tiers = max(tiers, s.Tier+1)
	}
	if tiers == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", min(p.Tier+1, tiers), tiers)
}

func planID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("%q is not a plan id (1, 2, …)", s)
	}
	return id, nil
}

// clip shortens s to n characters for a table.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
