package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"mesh/client"
)

func (a *app) modulesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "modules", Aliases: []string{"module"}, Short: "Modules: their settings and selectors"}
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List modules with their current build and selector",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			ms, raw, err := collect[client.Module](0, func(cursor *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListModulesWithResponse(cmd.Context(), &client.ListModulesParams{Limit: &n, Cursor: cursor})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			return list(a, ms, raw, []string{"NAME", "KIND", "CURRENT", "SELECTOR"}, func(m client.Module) []string {
				cur, sel := "-", m.Selector
				if m.CurrentBuild != nil {
					cur = fmt.Sprint(*m.CurrentBuild)
				}
				if sel == "" {
					sel = "-"
				}
				return []string{m.Name, m.Kind, cur, sel}
			})
		},
	}

	var (
		repository, tiers, deadline, onFailure, selector string
		sourcePaths                                      []string
		dryRun                                           bool
	)
	update := &cobra.Command{
		Use:   "update MODULE [--selector S] [--repository R] [--source-path P]... [--tiers JSON] [--tier-deadline D] [--on-failure halt|rollback] [--dry-run]",
		Short: "Change a module's settings or selector (operator)",
		Long: `Change what is given; the rest stays. meshctl reads the module's ETag and
writes with If-Match; when the module changed in between (412) it reads it
again and sends the same change, so only the fields named here are set.

A selector gives the module to every machine whose labels match:
requirements separated by commas, all of which must hold: key=value,
key!=value (true without the label too), key (set), !key (not set).
--selector "" takes the module from the machines it selected (never from
one a person assigned it to). Each machine that gains or loses the module
gets a new generation (trigger label). --dry-run shows which, and changes
nothing.`,
		Example: `  meshctl modules update web --selector 'role=web,zone!=b' --dry-run
  meshctl modules update web --selector 'role=web,zone!=b'
  meshctl modules update web --tiers '[{"machines":1},{"percent":50},{"percent":100}]'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body client.UpdateModuleJSONRequestBody
			fl := cmd.Flags()
			if fl.Changed("repository") {
				body.Repository = &repository
			}
			if fl.Changed("source-path") {
				body.SourcePaths = &sourcePaths
			}
			if fl.Changed("tiers") {
				var ts []client.Tier
				if err := json.Unmarshal([]byte(tiers), &ts); err != nil {
					return fmt.Errorf(`--tiers: a JSON list like [{"machines":1},{"percent":100}]: %v`, err)
				}
				body.Tiers = &ts
			}
			if fl.Changed("tier-deadline") {
				body.TierDeadline = &deadline
			}
			if fl.Changed("on-failure") {
				of := client.ModuleUpdateRequestOnFailure(onFailure)
				body.OnFailure = &of
			}
			if fl.Changed("selector") {
				body.Selector = &selector
			}
			if body == (client.UpdateModuleJSONRequestBody{}) {
				return fmt.Errorf("nothing to change: give a setting (see --help)")
			}
			return a.updateModule(cmd, args[0], body, dryRun)
		},
	}
	f := update.Flags()
	f.StringVar(&selector, "selector", "", `machines whose labels match get the module ("role=web,zone!=b"; "" for none)`)
	f.StringVar(&repository, "repository", "", "the forge repository its merges come from")
	f.StringArrayVar(&sourcePaths, "source-path", nil, "a path whose changes touch the module (repeatable; replaces the list)")
	f.StringVar(&tiers, "tiers", "", `its plans' tiers, JSON: [{"machines":1},{"percent":100}]`)
	f.StringVar(&deadline, "tier-deadline", "", "how long a tier may take before its plan halts (10m)")
	f.StringVar(&onFailure, "on-failure", "", "halt or rollback")
	f.BoolVar(&dryRun, "dry-run", false, "show which machines would gain or lose the module; change nothing")
	_ = update.RegisterFlagCompletionFunc("on-failure", cobra.FixedCompletions([]string{"halt", "rollback"}, cobra.ShellCompDirectiveNoFileComp))

	del := &cobra.Command{
		Use:   "delete MODULE",
		Short: "Delete a module no machine runs, with its builds and plans (admin)",
		Long: `Delete a module with its builds and plans. One still assigned or selected
anywhere, or that a machine reports running, is refused, naming them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			r, err := c.DeleteModuleWithResponse(cmd.Context(), args[0])
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusNoContent); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.encodeJSON(map[string]any{"deleted": args[0]})
			}
			fmt.Fprintf(a.out, "module %s deleted\n", args[0])
			return nil
		},
	}
	var currentReason string
	current := &cobra.Command{
		Use:   "current MODULE BUILD [--reason WHY]",
		Short: "Make a build current on every machine assigned the module at once (operator); no tiers, no canary",
		Long: `Make a finished build of a module current everywhere at once: every machine assigned
the module (and not pinned) gets a new generation. This is how a finished plan is gone back
on: make the build before it current again, with --reason. Going back to a build older than
the current one needs the reason, and moves every machine that runs a newer build back to it
(without one, no machine is ever given a build older than it runs). To roll a build out tier
by tier, use plans create.`,
		Example: `  meshctl modules current web 16 --reason "17 leaks memory"   # back to build 16 everywhere
  meshctl modules current web 18                                # forward to 18 everywhere`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			build, err := strconv.Atoi(args[1])
			if err != nil || build < 1 {
				return fmt.Errorf("%q: BUILD is a build's number (meshctl builds ls %s)", args[1], args[0])
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			body := client.SetCurrentBuildJSONRequestBody{Build: build}
			if currentReason != "" {
				body.Reason = &currentReason
			}
			r, err := c.SetCurrentBuildWithResponse(cmd.Context(), args[0], body)
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			back := ""
			if why := r.JSON200.Module.CurrentReason; why != nil && *why != "" {
				back = " (gone back: " + *why + "; machines on the builds it left move back to it)"
			}
			fmt.Fprintf(a.out, "build %d of %s is current%s: %d machine(s) given a new generation\n", build, args[0], back, r.JSON200.Machines)
			return nil
		},
	}
	current.Flags().StringVar(&currentReason, "reason", "", "why: required to go back to a build older than the current one")
	var kind, createRepo string
	create := &cobra.Command{
		Use:   "create MODULE [--kind service|host|controller] [--repository R]",
		Short: "Make a module (operator); give it a selector with 'modules update'",
		Example: `  meshctl modules create web
  meshctl modules update web --selector role=web`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			body := client.CreateModuleJSONRequestBody{Name: args[0]}
			if kind != "" {
				k := client.ModuleRequestKind(kind)
				body.Kind = &k
			}
			if createRepo != "" {
				body.Repository = &createRepo
			}
			r, err := c.CreateModuleWithResponse(cmd.Context(), body)
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusCreated); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			fmt.Fprintf(a.out, "module %s (%s) made\n", r.JSON201.Name, r.JSON201.Kind)
			return nil
		},
	}
	create.Flags().StringVar(&kind, "kind", "", "service (the default), host or controller")
	create.Flags().StringVar(&createRepo, "repository", "", "the forge repository its merges come from")
	_ = create.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions([]string{"service", "host", "controller"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(ls, create, update, current, del)
	return cmd
}

// updateModule writes a module's change under its ETag, reading it again
// after each 412 and sending the same (field-wise) change.
func (a *app) updateModule(cmd *cobra.Command, module string, body client.UpdateModuleJSONRequestBody, dryRun bool) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	for attempt := 1; ; attempt++ {
		got, err := c.GetModuleWithResponse(ctx, module)
		if err != nil {
			return reach(err)
		}
		if err := expect(got.HTTPResponse, got.Body, http.StatusOK); err != nil {
			return err
		}
		params := &client.UpdateModuleParams{IfMatch: got.HTTPResponse.Header.Get("ETag")}
		if dryRun {
			params.DryRun = &dryRun
		}
		r, err := c.UpdateModuleWithResponse(ctx, module, params, body)
		if err != nil {
			return reach(err)
		}
		if r.StatusCode() == http.StatusPreconditionFailed && attempt < maxAttempts {
			fmt.Fprintf(a.errOut, "module %s changed since it was read; reading it again\n", module)
			continue
		}
		if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
			return err
		}
		if a.jsonOut() {
			return a.printJSON(r.Body)
		}
		u := r.JSON200
		verb := "changed"
		if u.DryRun {
			verb = "would change (dry run: nothing written)"
		}
		sel := u.Module.Selector
		if sel == "" {
			sel = "none"
		}
		fmt.Fprintf(a.out, "module %s %s; selector: %s\n", module, verb, sel)
		// The settings given, as the controller stored them (a person
		// sees the tiers their plans will take, not only the selector).
		m := u.Module
		if body.Tiers != nil {
			fmt.Fprintf(a.out, "tiers: %s\n", tiersWords(m.Tiers))
		}
		if body.TierDeadline != nil {
			fmt.Fprintf(a.out, "tier deadline: %s\n", m.TierDeadline)
		}
		if body.OnFailure != nil {
			fmt.Fprintf(a.out, "on failure: %s\n", m.OnFailure)
		}
		if body.Repository != nil {
			fmt.Fprintf(a.out, "repository: %s\n", orDash(m.Repository))
		}
		if body.SourcePaths != nil {
			fmt.Fprintf(a.out, "source paths: %s\n", orDash(strings.Join(m.SourcePaths, ", ")))
		}
		return a.changesTable(u.Changes)
	}
}

// tiersWords says a module's tiers: "1 machine, 50%, 100%"; none is the
// default (one canary machine, then all).
func tiersWords(ts []client.Tier) string {
	if len(ts) == 0 {
		return "default (1 canary machine, then all)"
	}
	var ws []string
	for _, t := range ts {
		switch {
		case t.Machines != nil && *t.Machines == 1:
			ws = append(ws, "1 machine")
		case t.Machines != nil:
			ws = append(ws, fmt.Sprintf("%d machines", *t.Machines))
		case t.Percent != nil:
			ws = append(ws, fmt.Sprintf("%d%%", *t.Percent))
		default:
			ws = append(ws, "?")
		}
	}
	return strings.Join(ws, ", ")
}

// changesTable shows which machines gain and lose which modules.
func (a *app) changesTable(cs []client.SelectionChange) error {
	if len(cs) == 0 {
		fmt.Fprintln(a.out, "no machine gains or loses a module")
		return nil
	}
	rows := [][]string{{"MACHINE", "GAINS", "LOSES"}}
	for _, c := range cs {
		rows = append(rows, []string{c.Machine, orDash(strings.Join(c.Gains, ",")), orDash(strings.Join(c.Loses, ","))})
	}
	return a.table(rows)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
