package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"mesh/client"
)

// machineAdminCommands are what an admin does to a machine as a whole:
// revoke its identity, delete it, resolve its conflict.
func (a *app) machineAdminCommands() []*cobra.Command {
	var reason string
	revoke := &cobra.Command{
		Use:   "revoke MACHINE [--reason R]",
		Short: "Revoke a machine's identity: its token and certificates are refused from now (admin)",
		Long: `Revoke a machine's identity: its host token and every certificate of its
enrolment are refused on every instance from now, and its machine shows
revoked with the reason. To bring it back, delete it and enrol the machine
again.`,
		Example: `  meshctl machines revoke m1 --reason "disk sold"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			body := client.RevokeRequest{}
			if reason != "" {
				body.Reason = &reason
			}
			r, err := c.RevokeMachineWithResponse(cmd.Context(), args[0], body)
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			fmt.Fprintf(a.out, "%s: revoked; its token and certificates are refused\n", args[0])
			return nil
		},
	}
	revoke.Flags().StringVar(&reason, "reason", "", `why, shown with its state (default "revoked by <you>")`)

	del := &cobra.Command{
		Use:   "delete MACHINE",
		Short: "Remove a machine and its records; its host token stops working (admin)",
		Long: `Remove a machine and its records; its host token stops working, and its
host is refused from then on. What the host runs stays as it is (nothing is
sent to tear it down). Enrol the machine again (a new join token) to bring
it back.`,
		Example: `  meshctl machines delete m1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			r, err := c.DeleteMachineWithResponse(cmd.Context(), args[0])
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusNoContent); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.encodeJSON(map[string]any{"deleted": args[0]})
			}
			fmt.Fprintf(a.out, "%s: deleted\n", args[0])
			return nil
		},
	}

	resolve := &cobra.Command{
		Use:   "resolve MACHINE",
		Short: "Resolve a machine in conflict: the store's generation moves past what its host reports (admin)",
		Long: `Resolve a machine in conflict (its host reports a generation newer than the
store holds, as after a store restored from an old backup): its generation
moves past the host's, composed afresh from the store, and sending resumes.`,
		Example: `  meshctl machines resolve m1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			r, err := c.ResolveMachineWithResponse(cmd.Context(), args[0])
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			fmt.Fprintf(a.out, "%s: resolved at generation %d\n", args[0], r.JSON200.Generation)
			return nil
		},
	}
	return []*cobra.Command{revoke, del, resolve}
}

// varsCommand shows or changes a machine's variables, one KEY=VALUE (or
// KEY= to remove it) at a time over what was read, written with If-Match
// and re-read on a 412 like assign.
func (a *app) varsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "vars MACHINE [KEY=VALUE | KEY=]...",
		Short: "Show a machine's variables, or set (KEY=VALUE) and remove (KEY=) some (operator to change)",
		Long: `Show a machine's variables (${var.KEY} in manifests), or change some: each
KEY=VALUE sets one, each KEY= removes one; the others are kept. meshctl
reads the variables at the machine's generation, applies these changes,
and writes them with If-Match; when the machine changed in between (412) it
reads them again and applies only these changes to the fresh ones.`,
		Example: `  meshctl machines vars m1
  meshctl machines vars m1 port=9000 region=eu
  meshctl machines vars m1 region=`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			machine, edits := args[0], map[string]*string{}
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("%q: want KEY=VALUE, or KEY= to remove KEY", kv)
				}
				if v == "" {
					edits[k] = nil
				} else {
					edits[k] = &v
				}
			}
			for attempt := 1; ; attempt++ {
				// The variables and the generation they were read at (the
				// ETag), from one read of the store.
				got, err := c.GetVariablesWithResponse(cmd.Context(), machine)
				if err != nil {
					return reach(err)
				}
				if err := expect(got.HTTPResponse, got.Body, http.StatusOK); err != nil {
					return err
				}
				etag := got.HTTPResponse.Header.Get("ETag")
				vars := got.JSON200.Variables
				if vars == nil {
					vars = map[string]string{}
				}
				if len(edits) == 0 {
					if a.jsonOut() {
						return a.printJSON(got.Body)
					}
					keys := make([]string, 0, len(vars))
					for k := range vars {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					rows := [][]string{{"KEY", "VALUE"}}
					for _, k := range keys {
						rows = append(rows, []string{k, vars[k]})
					}
					return a.table(rows)
				}
				for k, v := range edits {
					if v == nil {
						delete(vars, k)
					} else {
						vars[k] = *v
					}
				}
				r, err := c.SetVariablesWithResponse(cmd.Context(), machine, &client.SetVariablesParams{IfMatch: etag}, client.Variables{Variables: vars})
				if err != nil {
					return reach(err)
				}
				if r.StatusCode() == http.StatusPreconditionFailed && attempt < maxAttempts {
					fmt.Fprintf(a.errOut, "%s changed since it was read at generation %s; reading it again\n", machine, strings.Trim(etag, `"`))
					continue
				}
				if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
					return err
				}
				if a.jsonOut() {
					return a.printJSON(r.Body)
				}
				gen, said := "", "variables written"
				if e := strings.Trim(r.HTTPResponse.Header.Get("ETag"), `"`); e != "" {
					gen = ", generation " + e
					if e == strings.Trim(etag, `"`) {
						// The same generation: the variables were already
						// so, and nothing new reaches the machine.
						said = "variables unchanged"
					}
				}
				fmt.Fprintf(a.out, "%s: %s%s\n", machine, said, gen)
				// A variable removed that a manifest names holds the
				// machine back: said here, not only in machines show.
				a.sayIfNotComposable(cmd.Context(), c, machine)
				return nil
			}
		},
	}
}

// releasesList lists the host releases with their state.
func (a *app) releasesList() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the host releases, newest first, with their state and the schemas they decode",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			rs, raw, err := collect[client.Release](0, func(cursor *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListHostReleasesWithResponse(cmd.Context(), &client.ListHostReleasesParams{Limit: &n, Cursor: cursor})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			return list(a, rs, raw, []string{"VERSION", "PLATFORM", "STATE", "DEFAULT", "SCHEMAS", "SIZE", "CREATED", "BY", "FAILURE"}, func(r client.Release) []string {
				return []string{r.Version, r.Os + "/" + r.Arch, releaseState(r), releaseDefault(r), r.Schemas, strconv.Itoa(r.Size),
					ago(&r.CreatedAt), r.CreatedBy, clip(r.Failure, 80)}
			})
		},
	}
}

// releaseDefault is a release's DEFAULT column. The fleet default is a
// version, but it reaches only the platforms a rollout of it tried: a
// release of the default version uploaded for another platform after the
// rollout waits for one of its own, and was shown "fleet default" beside
// the rest.
func releaseDefault(r client.Release) string {
	switch {
	case !r.FleetDefault:
		return ""
	case r.RolledOutAt == nil:
		return "default version, not rolled out on this platform"
	}
	return "fleet default"
}

// instancesCommand lists the controller's instances: which serve, which
// drain or stopped, and which stopped heartbeating.
func (a *app) instancesCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "instances",
		Aliases: []string{"instance"},
		Short:   "The controller's instances: their state, version and last heartbeat (viewer)",
		Long: `The controller's instances (replicas sharing one store), newest first: serving, starting,
draining, stopped, or unresponsive — a live state whose heartbeats stopped over a minute ago.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			is, raw, err := collect[client.Instance](0, func(_ *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListInstancesWithResponse(cmd.Context(), &client.ListInstancesParams{Limit: &n})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			return list(a, is, raw, []string{"ID", "STATE", "VERSION", "STARTED", "HEARTBEAT"}, func(i client.Instance) []string {
				return []string{i.Id, string(i.State), i.Version, ago(&i.StartedAt), ago(&i.HeartbeatAt)}
			})
		},
	}
}

// auditCommand lists the audit log, newest first, or one thing's events.
func (a *app) auditCommand() *cobra.Command {
	var limit int
	var target, machine, module, action, actor string
	cmd := &cobra.Command{
		Use:   "audit [--machine NAME | --module NAME | --target KIND/NAME] [--action A] [--actor WHO] [--limit N]",
		Short: "The audit log, newest first: who did what to what, refusals included (viewer)",
		Example: `  meshctl audit --limit 100
  meshctl audit --machine m1                  # everything that happened to m1, refusals of its host included
  meshctl audit --action revoke-machine       # every revocation, by whom and why
  meshctl audit --actor user:alice            # what alice did, with her API tokens`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return errors.New("--limit: a number of events from 1 up")
			}
			if machine != "" {
				target = "machine/" + machine
			}
			if module != "" {
				target = "module/" + module
			}
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			params := func(n int, cursor *string) *client.ListAuditEventsParams {
				p := &client.ListAuditEventsParams{Limit: &n, Cursor: cursor}
				for _, f := range []struct {
					v  string
					to **string
				}{{target, &p.Target}, {action, &p.Action}, {actor, &p.Actor}} {
					if f.v != "" {
						*f.to = &f.v
					}
				}
				return p
			}
			es, raw, err := collect[client.AuditEvent](limit, func(cursor *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListAuditEventsWithResponse(cmd.Context(), params(n, cursor))
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			if len(es) == 0 && target != "" && !strings.Contains(target, "/") {
				fmt.Fprintf(a.errOut, "no events of target %q: a target is KIND/NAME as the TARGET column shows it (machine/%s, module/%s: a plan's events are its module's, user/carol); --machine and --module add the kind\n", target, target, target)
			}
			return list(a, es, raw, []string{"WHEN", "ACTOR", "ACTION", "TARGET", "DETAIL"}, func(e client.AuditEvent) []string {
				return []string{e.At.Local().Format(localTime), e.Actor, e.Action, e.Target, clip(e.Detail, 100)}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "how many events at most")
	cmd.Flags().StringVar(&machine, "machine", "", "only the events of this machine (the target machine/NAME)")
	cmd.Flags().StringVar(&module, "module", "", "only the events of this module (the target module/NAME)")
	cmd.Flags().StringVar(&target, "target", "", "only the events of this target, exactly as the TARGET column shows it (user/carol, source/gh, …; a plan's events are its module's)")
	cmd.Flags().StringVar(&action, "action", "", "only the events of this action, exactly as the ACTION column shows it")
	cmd.Flags().StringVar(&actor, "actor", "", "only the events of this actor as the ACTOR column shows it: user:NAME (with that person's API tokens), host:NAME, controller (with its instances), anonymous (refused callers)")
	cmd.MarkFlagsMutuallyExclusive("machine", "module", "target")
	return cmd
}

// passwdCommand sets the caller's own password.
func (a *app) passwdCommand() *cobra.Command {
	var fromStdin bool
	cmd := &cobra.Command{
		Use:   "passwd",
		Short: "Set your own password, given the current one; every token of yours is revoked (log in again)",
		Long: `Set your own password (12 characters to 72 bytes), given the current one,
each from a prompt without echo, or from stdin with --password-stdin (its
first line the current password, its second the new one). Every session
and API token of yours is revoked, this login's too: log in again.`,
		Example: `  meshctl users passwd
  printf '%s\n%s\n' "$OLD" "$NEW" | meshctl users passwd --password-stdin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			var current, next string
			if fromStdin {
				in := bufio.NewReader(a.in)
				for _, p := range []*string{&current, &next} {
					line, err := in.ReadString('\n')
					if err != nil && !errors.Is(err, io.EOF) {
						return err
					}
					if *p = strings.TrimRight(line, "\r\n"); *p == "" {
						return errors.New("--password-stdin: want the current password on the first line, the new one on the second")
					}
				}
			} else {
				if current, err = a.password(false, "Current password: ", false); err != nil {
					return err
				}
				if next, err = a.password(false, "New password: ", true); err != nil {
					return err
				}
			}
			r, err := c.ChangePasswordWithResponse(cmd.Context(), client.ChangePasswordJSONRequestBody{CurrentPassword: current, NewPassword: next})
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusNoContent); err != nil {
				return err
			}
			url, _, _, _ := a.target()
			if a.jsonOut() {
				return a.encodeJSON(map[string]any{"password_changed": true, "revoked": "every session and API token of yours"})
			}
			fmt.Fprintf(a.out, "password changed; every session and API token of yours is revoked: meshctl login %s --user NAME\n", url)
			return nil
		},
	}
	cmd.Flags().BoolVar(&fromStdin, "password-stdin", false, "read the current password and the new one from stdin (two lines)")
	return cmd
}
