package main

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mesh/client"
)

// apiTokenFlags are the flags of 'tokens create' that make an API token.
type apiTokenFlags struct {
	name, role string
	labels     []string
}

// addTokenCommands adds to 'tokens' the API tokens and the list and
// revoke of both kinds.
func (a *app) addTokenCommands(cmd *cobra.Command, create *cobra.Command, expiresIn *string) {
	var f apiTokenFlags
	create.Flags().StringVar(&f.name, "api", "", "make a long-lived API token with this name (for CI or scripts) instead of a join token")
	create.Flags().StringVar(&f.role, "role", "", "an API token's role (default: yours; never more)")
	create.Flags().StringArrayVar(&f.labels, "label", nil, "a join token's label KEY=VALUE, given to the machine that enrols with it (repeatable)")
	_ = create.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"viewer", "operator", "admin", "builder"}, cobra.ShellCompDirectiveNoFileComp))
	create.Use = "create [--expires-in D] [--label K=V]... | create --api NAME [--role R] [--expires-in D]"
	create.Short = "Make a join token (for 'mesh-host enroll') or, with --api, a long-lived API token"
	create.Long = `Make a single-use, expiring join token, shown only once; --label gives
the machine that enrols with it those labels (a host never chooses its own).
With --api NAME, make an API token instead: a bearer token for CI or
scripts, of your role or a lesser one, expiring, revocable, shown only once.`
	create.Example = `  meshctl tokens create --expires-in 2h --label role=web --label zone=a
  TOKEN=$(meshctl tokens create -o json | jq -r .token)
  meshctl tokens create --api ci-main --role builder --expires-in 720h`
	join := create.RunE
	create.RunE = func(c *cobra.Command, args []string) error {
		if f.name == "" {
			if f.role != "" {
				return fmt.Errorf("--role is for an API token (--api NAME)")
			}
			return join(c, args)
		}
		if len(f.labels) > 0 {
			return fmt.Errorf("--label is for a join token; an API token carries none")
		}
		return a.createAPIToken(c, f, *expiresIn)
	}

	var apiOnly, joinOnly bool
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List API tokens (yours; an admin's: everyone's) and join tokens (admin)",
		Long: `List API tokens with their role, expiry and last use (recorded at most
once a minute), and, for an admin, join tokens with their state. Neither
the tokens nor their hashes are ever shown again. With -o json:
{"api_tokens": [...], "join_tokens": [...]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			out := struct {
				APITokens  []client.APIToken      `json:"api_tokens"`
				JoinTokens []client.JoinTokenInfo `json:"join_tokens"`
			}{APITokens: []client.APIToken{}, JoinTokens: []client.JoinTokenInfo{}}
			if !joinOnly {
				ts, _, err := collect[client.APIToken](0, func(cursor *string, n int) (*http.Response, []byte, error) {
					r, err := c.ListAPITokensWithResponse(cmd.Context(), &client.ListAPITokensParams{Limit: &n, Cursor: cursor})
					if err != nil {
						return nil, nil, err
					}
					return r.HTTPResponse, r.Body, nil
				})
				if err != nil {
					return err
				}
				out.APITokens = append(out.APITokens, ts...)
			}
			if !apiOnly {
				jts, _, err := collect[client.JoinTokenInfo](0, func(cursor *string, n int) (*http.Response, []byte, error) {
					r, err := c.ListJoinTokensWithResponse(cmd.Context(), &client.ListJoinTokensParams{Limit: &n, Cursor: cursor})
					if err != nil {
						return nil, nil, err
					}
					return r.HTTPResponse, r.Body, nil
				})
				var pe *problemError
				switch {
				case err == nil:
					out.JoinTokens = jts
				case joinOnly || !errors.As(err, &pe) || pe.Status != http.StatusForbidden:
					return err
				} // not an admin: API tokens only
			}
			if a.jsonOut() {
				return a.encodeJSON(out)
			}
			rows := [][]string{{"KIND", "ID", "NAME/USED BY", "ROLE/LABELS", "STATE", "EXPIRES", "LAST USED"}}
			for _, t := range out.APITokens {
				rows = append(rows, []string{"api", t.Id, t.Name + " (" + t.User + ")", string(t.Role), tokenState(string(t.State), t.RevokedAt, t.RevokedBy, nil),
					t.ExpiresAt.Local().Format(localTime), ago(t.LastUsedAt)})
			}
			for _, t := range out.JoinTokens {
				used := "-"
				if t.UsedBy != nil {
					used = *t.UsedBy
				}
				labels := "-"
				if t.Labels != nil && len(*t.Labels) > 0 {
					labels = formatLabels(*t.Labels)
				}
				rows = append(rows, []string{"join", strconv.FormatInt(t.Id, 10), used, labels, tokenState(string(t.State), t.RevokedAt, t.RevokedBy, t.UsedAt),
					t.ExpiresAt.Local().Format(localTime), "-"})
			}
			return a.table(rows)
		},
	}
	ls.Flags().BoolVar(&apiOnly, "api", false, "API tokens only")
	ls.Flags().BoolVar(&joinOnly, "join", false, "join tokens only")
	ls.MarkFlagsMutuallyExclusive("api", "join")

	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API token (at-…) or an unused join token (a number)",
		Long: `Revoke a token by the id 'tokens ls' shows. An API token (id at-…) is
refused on every instance at once; a join token (a number) can no longer
enrol a machine (a used one cannot be revoked: delete its machine).`,
		Example: `  meshctl tokens revoke at-3f9c0a1b2c3d4e5f
  meshctl tokens revoke 12`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			if n, err := strconv.ParseInt(args[0], 10, 64); err == nil {
				r, err := c.RevokeJoinTokenWithResponse(cmd.Context(), n)
				if err != nil {
					return reach(err)
				}
				if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
					return err
				}
				if a.jsonOut() {
					return a.printJSON(r.Body)
				}
				fmt.Fprintf(a.out, "join token %d: %s\n", r.JSON200.Id, r.JSON200.State)
				return nil
			}
			r, err := c.RevokeAPITokenWithResponse(cmd.Context(), args[0])
			if err != nil {
				return reach(err)
			}
			if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
				return err
			}
			if a.jsonOut() {
				return a.printJSON(r.Body)
			}
			fmt.Fprintf(a.out, "API token %s (%s): %s\n", r.JSON200.Id, r.JSON200.Name, r.JSON200.State)
			return nil
		},
	}
	cmd.Short = "Join tokens (hosts enrol with them) and API tokens (for CI and scripts)"
	cmd.AddCommand(ls, revoke)
}

// joinTokenLabels reads --label flags into the join token's body.
func joinTokenLabels(cmd *cobra.Command, body *client.CreateJoinTokenJSONRequestBody) error {
	labels, err := cmd.Flags().GetStringArray("label")
	if err != nil || len(labels) == 0 {
		return nil
	}
	m, err := parseLabelArgs(labels, false)
	if err != nil {
		return err
	}
	lm := client.LabelMap(m)
	body.Labels = &lm
	return nil
}

func (a *app) createAPIToken(cmd *cobra.Command, f apiTokenFlags, expiresIn string) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	body := client.CreateAPITokenJSONRequestBody{Name: f.name}
	if f.role != "" {
		role := client.APITokenRequestRole(f.role)
		body.Role = &role
	}
	if expiresIn != "" {
		body.ExpiresIn = &expiresIn
	}
	r, err := c.CreateAPITokenWithResponse(cmd.Context(), body)
	if err != nil {
		return reach(err)
	}
	if err := expect(r.HTTPResponse, r.Body, http.StatusCreated); err != nil {
		return err
	}
	if a.jsonOut() {
		return a.printJSON(r.Body)
	}
	t := r.JSON201
	fmt.Fprintln(a.errOut, "The token is shown only now; use it as MESH_TOKEN or an Authorization: Bearer header.")
	return a.table([][]string{{"ID", "ROLE", "EXPIRES", "TOKEN"}, {t.Id, string(t.Role), t.ExpiresAt.Local().Format(localTime), t.Token}})
}

// addUserCommands adds ls, update, disable and enable to 'users'.
func (a *app) addUserCommands(cmd *cobra.Command) {
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List users, newest first (admin)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.apiClient()
			if err != nil {
				return err
			}
			us, raw, err := collect[client.User](0, func(cursor *string, n int) (*http.Response, []byte, error) {
				r, err := c.ListUsersWithResponse(cmd.Context(), &client.ListUsersParams{Limit: &n, Cursor: cursor})
				if err != nil {
					return nil, nil, err
				}
				return r.HTTPResponse, r.Body, nil
			})
			if err != nil {
				return err
			}
			return list(a, us, raw, []string{"NAME", "ROLE", "STATE", "CREATED"}, func(u client.User) []string {
				return []string{u.Name, u.Role, userState(u), ago(&u.CreatedAt)}
			})
		},
	}
	var role string
	var disabled bool
	update := &cobra.Command{
		Use:   "update NAME [--role R] [--disabled=true|false]",
		Short: "Change a user's role, or disable or enable them (admin)",
		Long: `Change a user's role, or disable or enable them. A disable or a role
change ends every session and API token the user held, on every instance
at once; a disabled user cannot log in.`,
		Example: `  meshctl users update carol --role viewer
  meshctl users update carol --disabled`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body client.UpdateUserJSONRequestBody
			if cmd.Flags().Changed("role") {
				r := client.UserUpdateRole(role)
				body.Role = &r
			}
			if cmd.Flags().Changed("disabled") {
				body.Disabled = &disabled
			}
			if body.Role == nil && body.Disabled == nil {
				return fmt.Errorf("nothing to change: give --role or --disabled")
			}
			return a.updateUser(cmd, args[0], body)
		},
	}
	update.Flags().StringVar(&role, "role", "", "viewer, operator, admin or builder")
	update.Flags().BoolVar(&disabled, "disabled", false, "disable (or, =false, enable) the user")
	_ = update.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"viewer", "operator", "admin", "builder"}, cobra.ShellCompDirectiveNoFileComp))
	toggle := func(use, short string, off bool) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.updateUser(cmd, args[0], client.UpdateUserJSONRequestBody{Disabled: &off})
			},
		}
	}
	cmd.AddCommand(ls, update,
		toggle("disable", "Disable a user: no login, and every token they held is revoked (admin)", true),
		toggle("enable", "Let a disabled user log in again (their old tokens stay revoked) (admin)", false))
}

func (a *app) updateUser(cmd *cobra.Command, name string, body client.UpdateUserJSONRequestBody) error {
	c, err := a.apiClient()
	if err != nil {
		return err
	}
	r, err := c.UpdateUserWithResponse(cmd.Context(), name, body)
	if err != nil {
		return reach(err)
	}
	if err := expect(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
		return err
	}
	if a.jsonOut() {
		return a.printJSON(r.Body)
	}
	return a.table([][]string{{"NAME", "ROLE", "STATE"}, {r.JSON200.Name, r.JSON200.Role, userState(*r.JSON200)}})
}

func userState(u client.User) string {
	if u.Disabled != nil && *u.Disabled {
		return "disabled"
	}
	return "enabled"
}

// parseLabelArgs reads KEY=VALUE arguments; with removals, KEY- too (its
// value is then "" in the map: remove it).
func parseLabelArgs(args []string, removals bool) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range args {
		if k, ok := strings.CutSuffix(s, "-"); ok && k != "" && removals && !strings.Contains(s, "=") {
			out[k] = ""
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" || v == "" {
			if removals {
				return nil, fmt.Errorf("%q: a label is KEY=VALUE (or KEY- to remove it)", s)
			}
			return nil, fmt.Errorf("%q: a label is KEY=VALUE", s)
		}
		out[k] = v
	}
	return out, nil
}

func formatLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// tokenState is a token's state word with when it became so (and by whom,
// revoked): "revoked" alone did not say when, though the API does.
func tokenState(state string, revokedAt *time.Time, revokedBy *string, usedAt *time.Time) string {
	switch {
	case revokedAt != nil:
		state += " " + ago(revokedAt)
		if revokedBy != nil && *revokedBy != "" {
			state += " by " + *revokedBy
		}
	case usedAt != nil:
		state += " " + ago(usedAt)
	}
	return state
}
